/* Literals meeting tensors in the DSL (docs/dsl.md, "Literals and dtypes"):
 * a literal takes the dtype of the tensor it meets when its value survives,
 * exactly (NEP 50 style); what would be truncated or wrap around is an error
 * at the literal (the exact messages are in test_dsl_errors.c). */
#include <graphrun.h>
#include <stdint.h>

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

/* Runs each program and checks x's dtype and first element. */
static void check_values(const value_case *cases, int n) {
  for (int i = 0; i < n; i++) {
    const value_case *c = &cases[i];
    gr_tensor t;
    bool ok = gt_dsl_run(c->src, "x", 1, &t);
    GR_CHECK_MSG(ok, "%s", c->src);
    if (!ok) continue;
    GR_CHECK_MSG(t.dtype == c->dtype, "%s: dtype %s, want %s", c->src, gr_dtype_name(t.dtype),
                 gr_dtype_name(c->dtype));
    GR_CHECK_MSG(gr_tensor_get_f64(&t, 0) == c->want, "%s: %.17g, want %.17g", c->src,
                 gr_tensor_get_f64(&t, 0), c->want);
    gr_tensor_release(&t);
  }
}

#define CHECK_VALUES(cases) check_values(cases, (int)(sizeof cases / sizeof cases[0]))

static void test_int_literal_keeps_dtype(void) {
  CHECK_VALUES(int_cases);
}
static void test_bools(void) {
  CHECK_VALUES(bool_cases);
}
static void test_loop_variables(void) {
  CHECK_VALUES(loop_cases);
}

/* Integers are exact beyond 2^53: folded with 64-bit arithmetic and stored
 * as such in an i64 constant. */
static void test_int64_exact(void) {
  const char *srcs[] = {"x = const(9223372036854775807, i64)",
                        "x = const(2 ** 62 + (2 ** 62 - 1), i64)",
                        "x = const(9223372036854775807 - 3037000499 * 3037000499 + "
                        "3037000499 * 3037000499, i64)"};
  for (int k = 0; k < 3; k++) {
    gr_tensor t;
    bool ok = gt_dsl_run(srcs[k], "x", 1, &t);
    GR_CHECK_MSG(ok, "%s", srcs[k]);
    if (!ok) continue;
    GR_CHECK(t.dtype == GR_I64);
    GR_CHECK_MSG(*(const int64_t *)gr_tensor_data(&t) == INT64_MAX, "%s: %lld", srcs[k],
                 (long long)*(const int64_t *)gr_tensor_data(&t));
    gr_tensor_release(&t);
  }
  gr_tensor t;
  GR_CHECK(gt_dsl_run("x = const(9007199254740993, i64)", "x", 1, &t));
  if (t.buf) GR_CHECK_EQ_INT(*(const int64_t *)gr_tensor_data(&t), 9007199254740993LL);
  gr_tensor_release(&t);
}

int main(void) {
  GR_RUN(test_int_literal_keeps_dtype);
  GR_RUN(test_bools);
  GR_RUN(test_int64_exact);
  GR_RUN(test_loop_variables);
  return gr_test_finish();
}
