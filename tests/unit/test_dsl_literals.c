/* Literals meeting tensors in the DSL (docs/dsl.md, "Literals and dtypes"):
 * a literal takes the dtype of the tensor it meets when its value survives,
 * exactly (NEP 50 style); what would be truncated or wrap around is an error
 * at the literal (the exact messages are in test_dsl_errors.c). Issue 19,
 * item 7: every program runs on 1 device and spread round robin over 3
 * (bit-identical values), and a literal's dtype is checked under a
 * gradient against finite differences. */
#include <graphrun.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "gr_test.h"
#include "test_util.h"

typedef struct value_case {
  const char *src; /* binds x */
  gr_dtype dtype;
  double want; /* x's first element */
} value_case;

static const value_case int_cases[] = {
    /* an integer literal that fits takes the integer tensor's dtype */
    {"x = const(7, i64) * 2", GR_I64, 14},
    {"x = const(1, u8) + 254", GR_U8, 255},
    {"x = const(0, u8) + 0", GR_U8, 0},
    {"x = const(1, i32) + 2147483646", GR_I32, 2147483647},
    {"x = const(-5, i32) * -1", GR_I32, 5},
    {"labels = const([3, 1], i64)\nx = labels + 1", GR_I64, 4},
    {"x = maximum(const(3, i32), 5)", GR_I32, 5},
    {"v = variable(const(1, i64))\nx = assign_add(v, 2)", GR_I64, 3},
    /* a float tensor takes any number finite in its dtype */
    {"x = const(2.0) * 0.5", GR_F32, 1},
    {"x = const(2.0, f64) * 1e300", GR_F64, 2e300},
    /* f32's largest value as printed rounds to FLT_MAX: it fits */
    {"x = const(1.0) * 3.4028235e38", GR_F32, 3.4028234663852886e38},
    {"x = const(2.0, f64) + 3", GR_F64, 5},
};

/* bool is an integer dtype of range 0..1; true and false go anywhere. */
static const value_case bool_cases[] = {
    {"x = const(true)", GR_BOOL, 1},
    {"x = const([false, true])", GR_BOOL, 0},
    {"x = const(1, bool)", GR_BOOL, 1},
    {"b = const(true)\nx = b == 1", GR_BOOL, 1},
    {"b = const(true)\nx = b == 0", GR_BOOL, 0},
    {"x = const(2.5) * true", GR_F32, 2.5},
    {"x = cond(1) { 4 } else { 5 }", GR_F32, 4},
};

/* A loop variable keeps its dtype: a literal rebinding takes it, integer
 * arithmetic with integer literals stays integer. */
static const value_case loop_cases[] = {
    {"i, x = while (i = const(0, i32), x = const(0, i32); i < 5) { i = i + 1; x = 7 }", GR_I32, 7},
    {"i, x = while (i = const(0, i64), x = const(1, i64); i < 40) {\n  i = i + 1\n  x = x * 2\n}",
     GR_I64, 1099511627776.0},
    {"x = while (x = const(0.0, f64); x < 2) { x = x + 0.5 }", GR_F64, 2},
};

/* The integer and float cases again with the tensor computed (an
 * identity, a loop) rather than a constant: a constant is copied to each
 * device that uses it, so only these make a spread run send the tensor a
 * literal meets from one device to another. The reproducers are
 * refused at the literal (test_dsl_errors.c); their written-out fixes run
 * here. */
static const value_case computed_cases[] = {
    {"a = identity(const(7, i64))\nx = a * 2", GR_I64, 14},
    {"a = identity(const(1, u8))\nx = a + 254", GR_U8, 255},
    {"a = identity(const(1, i32))\nx = a + 2147483646", GR_I32, 2147483647},
    {"a = identity(const(-5, i32))\nx = a * -1", GR_I32, 5},
    {"a = identity(const([3, 1], i64))\nx = 1 + a", GR_I64, 4},
    {"a = identity(const(3, i32))\nx = maximum(a, 5)", GR_I32, 5},
    {"a = identity(const(2.0))\nx = a * 0.5", GR_F32, 1},
    {"a = identity(const(2.0, f64))\nx = a * 1e300", GR_F64, 2e300},
    {"a = identity(const(2.0, f64))\nx = a + 3", GR_F64, 5},
    {"a = identity(const(7, i64))\nx = cast(a, f32) * 0.9", GR_F32, (double)(7.0f * 0.9f)},
    {"a = identity(const(1, i32))\nx = cast(a, f32) + 0.5", GR_F32, 1.5},
    {"a = identity(const(1, u8))\nx = cast(a, i32) + 300", GR_I32, 301},
    {"x = while (x = const(0.0); x < 3) { x = x + 0.5 }", GR_F32, 3},
    {"x = while (x = const(0, u8); x < 250) { x = x + 5 }", GR_U8, 250},
    {"i, x = while (i = 0, x = const(1, i64); i < 2) {\n  i = i + 1\n  x = x * 3000000000\n}",
     GR_I64, 9e18},
};

/* Runs each program on 1 device and spread round robin over 3 and checks
 * x's dtype and first element; the 3-device value is bit-identical to the
 * 1-device one. crosses: the spread run must send something between
 * devices (false for programs of constants only, see computed_cases). */
static void check_values(const value_case *cases, int n, bool crosses) {
  for (int i = 0; i < n; i++) {
    const value_case *c = &cases[i];
    gr_tensor t[2];
    for (int d = 0; d < 2; d++) {
      int devices = d ? 3 : 1;
      int64_t sends = 0;
      bool ok = gt_dsl_run_on(c->src, "x", devices, &t[d], &sends);
      GR_CHECK_MSG(!crosses || devices == 1 || sends > 0, "%s: nothing crossed devices", c->src);
      GR_CHECK_MSG(ok, "%s (%d devices)", c->src, devices);
      if (!ok) {
        t[d] = gr_tensor_empty();
        continue;
      }
      GR_CHECK_MSG(t[d].dtype == c->dtype, "%s (%d devices): dtype %s, want %s", c->src, devices,
                   gr_dtype_name(t[d].dtype), gr_dtype_name(c->dtype));
      GR_CHECK_MSG(gr_tensor_get_f64(&t[d], 0) == c->want, "%s (%d devices): %.17g, want %.17g",
                   c->src, devices, gr_tensor_get_f64(&t[d], 0), c->want);
    }
    if (t[0].buf && t[1].buf) GR_CHECK_MSG(gt_bit_equal(&t[1], &t[0]), "%s: 3 devices", c->src);
    gr_tensor_release(&t[0]);
    gr_tensor_release(&t[1]);
  }
}

#define CHECK_VALUES(cases, crosses)                                                               \
  check_values(cases, (int)(sizeof cases / sizeof cases[0]), crosses)

static void test_int_literal_keeps_dtype(void) {
  CHECK_VALUES(int_cases, false);
}
static void test_bools(void) {
  CHECK_VALUES(bool_cases, false);
}
static void test_loop_variables(void) {
  CHECK_VALUES(loop_cases, true);
}
static void test_computed_operands(void) {
  CHECK_VALUES(computed_cases, true);
}

/* Integers are exact beyond 2^53: folded with 64-bit arithmetic and stored
 * as such in an i64 constant, and a literal meeting a computed i64 tensor is
 * added in i64 (on 1 device and spread over 3, where the tensor crosses). */
static void test_int64_exact(void) {
  const struct {
    const char *src;
    int64_t want;
  } cases[] = {
      {"x = const(9223372036854775807, i64)", INT64_MAX},
      {"x = const(2 ** 62 + (2 ** 62 - 1), i64)", INT64_MAX},
      {"x = const(9223372036854775807 - 3037000499 * 3037000499 + 3037000499 * 3037000499, i64)",
       INT64_MAX},
      {"x = const(9007199254740993, i64)", 9007199254740993LL},
      {"a = identity(const(9223372036854775806, i64))\nx = a + 1", INT64_MAX},
      {"a = identity(const(9007199254740992, i64))\nx = 1 + a", 9007199254740993LL},
  };
  for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++)
    for (int devices = 1; devices <= 3; devices += 2) {
      gr_tensor t;
      bool ok = gt_dsl_run(cases[k].src, "x", devices, &t);
      GR_CHECK_MSG(ok, "%s (%d devices)", cases[k].src, devices);
      if (!ok) continue;
      GR_CHECK(t.dtype == GR_I64);
      GR_CHECK_MSG(t.dtype == GR_I64 && *(const int64_t *)gr_tensor_data(&t) == cases[k].want,
                   "%s (%d devices): %lld", cases[k].src, devices,
                   (long long)*(const int64_t *)gr_tensor_data(&t));
      gr_tensor_release(&t);
    }
}

/* A literal meeting an f64 tensor stays f64 through a loop and its
 * gradient: r = v * 0.1^3 + ..., so dr/dv = 0.1^3 in f64 (0.1 as an f32
 * would be off by 4.5e-8 relative), against central differences, on 1 and
 * 3 devices (bit-identical). */
static void test_literals_under_gradient(void) {
  const char *fmt = "v = variable(const(%.17g, f64))\n"
                    "i, r = while (i = 0, x = v; i < 3) {\n  i = i + 1\n  x = x * 0.1 + 0.3\n}\n"
                    "g = gradients(r, v)\n";
  const double v0 = 1.25, h = 1e-3;
  gr_tensor g[2];
  for (int d = 0; d < 2; d++) {
    int devices = d ? 3 : 1;
    char src[256];
    double r[2];
    bool ok = true;
    for (int side = 0; side < 2; side++) {
      snprintf(src, sizeof src, fmt, side ? v0 - h : v0 + h);
      gr_tensor t;
      ok = ok && gt_dsl_run(src, "r", devices, &t);
      r[side] = ok ? gr_tensor_get_f64(&t, 0) : NAN;
      if (ok) {
        GR_CHECK(t.dtype == GR_F64);
        gr_tensor_release(&t);
      }
    }
    snprintf(src, sizeof src, fmt, v0);
    int64_t sends = 0;
    ok = ok && gt_dsl_run_on(src, "g", devices, &g[d], &sends);
    GR_CHECK_MSG(ok, "%d devices", devices);
    if (!ok) {
      g[d] = gr_tensor_empty();
      continue;
    }
    GR_CHECK_MSG(devices == 1 || sends > 0, "nothing crossed devices");
    double got = gr_tensor_get_f64(&g[d], 0), fd = (r[0] - r[1]) / (2 * h);
    GR_CHECK_MSG(g[d].dtype == GR_F64 && fabs(got - 0.1 * 0.1 * 0.1) <= 1e-15,
                 "%d devices: dr/dv = %.17g, want 0.001", devices, got);
    GR_CHECK_MSG(fabs(got - fd) <= 1e-12, "%d devices: dr/dv = %.17g, differences %.17g", devices,
                 got, fd);
  }
  if (g[0].buf && g[1].buf) GR_CHECK(gt_bit_equal(&g[1], &g[0]));
  gr_tensor_release(&g[0]);
  gr_tensor_release(&g[1]);
}

int main(void) {
  GR_RUN(test_int_literal_keeps_dtype);
  GR_RUN(test_bools);
  GR_RUN(test_int64_exact);
  GR_RUN(test_loop_variables);
  GR_RUN(test_computed_operands);
  GR_RUN(test_literals_under_gradient);
  return gr_test_finish();
}
