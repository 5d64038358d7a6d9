/* Table-driven test of DSL error messages: each malformed program must fail
 * with a message that starts with the exact "file:line:col: error:" and holds
 * a key phrase, followed by the source line and a caret; never a crash. */
#include <graphrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_dsl.h"
#include "gr_test.h"
#include "test_util.h"

typedef struct bad_case {
  const char *src;
  int line, col;
  const char *phrase;
} bad_case;

static const bad_case cases[] = {
    {"x = 2 $ 3", 1, 7, "unexpected character '$'"},
    {"x = \"abc", 1, 5, "unterminated string"},
    {"x = 1e", 1, 5, "exponent has no digits"},
    {"x = 12abc", 1, 5, "malformed number"},
    {"x = 99999999999999999999", 1, 5, "integer literal out of range"},
    {"x = a & b", 1, 7, "did you mean '&&'"},
    {"x = a | b", 1, 7, "did you mean '||'"},
    {"x = \"a\\q\"", 1, 7, "unknown escape"},
    {"x = 1\n\n   y = 2 ` 3", 3, 10, "unexpected character '`'"},
    {"x = ", 1, 5, "expected an expression, found end of file"},
    {"x = (1 + 2", 1, 11, "unclosed '(' opened at line 1"},
    {"def f(x) {\n  y = x\n", 3, 1, "unclosed '{' opened at line 1"},
    {"x = [1, 2", 1, 10, "unclosed '['"},
    {"x = 1 2", 1, 7, "expected end of statement"},
    {"x = f(1,, 2)", 1, 9, "expected an expression, found ','"},
    {"x = relu(a=1, 2)", 1, 15, "positional argument after keyword"},
    {"x = relu(y=1, y=2)", 1, 15, "keyword argument 'y' given twice"},
    {"}", 1, 1, "unexpected '}'"},
    {"def (x) { }", 1, 5, "expected a name after 'def'"},
    {"def f(x, x) { }", 1, 10, "parameter 'x' given twice"},
    {"import foo", 1, 8, "expected a file name string"},
    {"x = cond(1) { 2 }", 1, 18, "expected 'else'"},
    {"x = while(i = 0 i < 3) { i }", 1, 17, "expected ';' before the loop condition"},
    {"scope \"a\" x = 1", 1, 11, "expected '{'"},
    {"a, = 1", 1, 4, "expected a name or an expression after ','"},
    {"x = 1 +", 1, 8, "expected an expression"},
    {"fetch", 1, 6, "expected a name"},
    {"x = [1, 2]]", 1, 11, "expected end of statement"},
    {"x = f(1", 1, 8, "unclosed '('"},
    {"colocate_with(a, b) { }", 1, 18, "colocate_with takes one node"},
    {"x = 1\n  y = (2 +\n 3", 3, 3, "unclosed '(' opened at line 2"},
    {"scope \"a\" {\n  x = 1\n  scope \"b\" {\n    y = 2\n}\n", 6, 1,
     "unclosed '{' opened at line 1"},
    {"x = (1 + 2]", 1, 11, "expected ')' to close the '(' opened at line 1"},
    {"x = 5 ** 2 2", 1, 12, "expected end of statement"},
    {"y = zeros([2])\nz = y[0]", 2, 6, "expected end of statement"},
    {"y = relux(1)", 1, 5, "unknown op or function 'relux' (did you mean 'relu'?)"},
    {"y = x + 1", 1, 5, "undefined name 'x'"},
    {"x = 1\nx = 2", 2, 1, "redefinition of 'x'"},
    {"x = placeholder(f32, [?, 4])\ny = reduce_sum(x, keepdim=true)", 2, 19,
     "unknown attr 'keepdim' for op reduce_sum"},
    {"x = one_hot(const([1], i64), depth=2.5)", 1, 30, "attr 'depth' of one_hot must be int"},
    {"x = placeholder(dtype=[1])", 1, 17, "attr 'dtype' of placeholder must be dtype"},
    {"x = placeholder(f32, [?, 4], 3)", 1, 30, "too many arguments for op placeholder"},
    {"x = relu()", 1, 5, "op relu takes 1 input, got 0"},
    {"x = add(1, 2, 3)", 1, 15, "too many arguments for op add"},
    {"x = reshape(zeros([4]))", 1, 5, "needs attr 'shape'"},
    {"x = placeholder(f32, [?, -4])", 1, 26, "dim 1 is negative (-4)"},
    {"x = placeholder(f32, [?, 2.5])", 1, 26, "dim 1 must be an integer >= 0 or '?', got a number"},
    {"x = relu(zeros([2]), name=\"a\")", 1, 22, "unknown attr 'name' for op relu"},
    {"def f(x) { return x }\ny = f", 2, 5, "is a def"},
    {"x = 1\ny = x(2)", 2, 5, "not a function"},
    {"y = relu", 1, 5, "'relu' is an op: call it"},
    {"fetch nothing", 1, 7, "undefined name 'nothing'"},
    {"x = 1\ntarget x, nothing", 2, 11, "undefined name 'nothing'"},
    {"a = zeros([2, 3])\nb = zeros([2, 3])\nc = a @ b", 3, 7, "matmul"},
    {"a = zeros([2, 3]) + zeros([4])", 1, 19, "add"},
    {"x = reshape(zeros([4]), [3, -1])", 1, 5, "reshape"},
    {"x = zeros([2]) + [[1], [2, 3]]", 1, 18, "ragged"},
    {"x = \"s\" + 1", 1, 5, "a string is not a tensor"},
    {"x = [?, 3] + 1", 1, 5, "holds numbers or bools only"},
    {"a = zeros([2], i32)\nb = a + zeros([2])", 2, 7, "is i32 but input 'b' is f32"},
    {"x = dim(placeholder(f32, [?, 4]), 0)", 1, 5, "dim 0 of 'placeholder' is unknown"},
    {"x = dim(zeros([2]), 3)", 1, 21, "axis 3 is out of range"},
    {"y = 1 / 0", 1, 7, "division by zero in a constant"},
    {"a, b = zeros([2])", 1, 1, "cannot unpack 1 value into 2 names"},
    {"a = 1\nb, a = split(zeros([4]), 2)", 2, 4, "redefinition of 'a'"},
    {"device \"/job:ps/bogus:1\" { x = 1 }", 1, 8, "bad device string"},
    {"device 7 { x = 1 }", 1, 8, "device needs a string"},
    {"scope 3 { }", 1, 7, "scope needs a string"},
    {"scope \"a b\" { x = 1 }", 1, 7, "invalid name scope"},
    {"control_dependencies(1) { }", 1, 22, "expected a node, got a number"},
    {"colocate_with(3) { x = 1 }", 1, 15, "colocate_with needs a node"},
    {"scope \"a\" { def g(y) { return y } }", 1, 13, "'def' is only allowed at the top level"},
    {"scope \"a\" { fetch x }", 1, 13, "only allowed at the top level"},
    {"return 1", 1, 1, "'return' outside a def"},
    {"def f(x) { return x }\ny = f(1, 2)", 2, 10, "too many arguments: f takes 1"},
    {"def f(x) { return x }\ny = f()", 2, 5, "f: missing argument 'x'"},
    {"def f(x) { return x }\ny = f(z=1)", 2, 7, "f has no parameter 'z'"},
    {"def f(x) { return f(x) }\ny = f(1)", 1, 19, "calls nested deeper than 64"},
    {"def f(x) { return x + q }\ny = f(1)", 1, 23, "undefined name 'q'"},
    {"def f(x) { return 1 }\ndef f(y) { return 2 }", 2, 1, "redefinition of 'f'"},
    {"def f(x) { y = 1 }\nz = f(1) + 1", 2, 5, "has no value"},
    {"g = group()\ny = g + 1", 2, 5, "has no outputs"},
    {"def f(x) { return f([x, x]) }\ny = f(1)", 1, 21, "list too large"},
    {"x = cond(true) { y = 1 } else { 2 }", 1, 16, "this block has no value"},
    {"x = while(i = 0, i = 1; i < 3) { i = i + 1 }", 1, 18, "loop variable 'i' given twice"},
    {"x = cond(true) { 1 } else { zz }", 1, 29, "undefined name 'zz'"},
    {"x = while(i = 0; i < 3) { i = i + q }", 1, 35, "undefined name 'q'"},
    {"import \"nonexistent_file_dsl_test.gr\"", 1, 1, "cannot import"},
    {"x = variable(zeros([2]))\ny = assign(1, 2)", 2, 12, "must be a variable"},
    {"x = minimize(1, 2)", 1, 17, "the optimizer must be"},
    {"x = sgd(0)", 1, 5, "learning_rate must be > 0"},
    {"x = sgd(0.1, foo=1)", 1, 14, "unknown keyword argument 'foo' for sgd"},
    {"x = const(zeros([2]))", 1, 11, "must be a literal"},
    {"x = const(1, 5)", 1, 14, "dtype must be a dtype"},
    {"x = zeros([2], shape=[3])", 1, 16, "'shape' given twice"},
    {"x = 1\ny = add(x, x, name=3)", 2, 15, "unknown attr 'name' for op add (attrs: none)"},
    /* literals meeting tensors: never truncated or wrapped (issue 19, item 7) */
    {"x = const(7, i64) * 0.9", 1, 21,
     "error: literal 0.9 is a float but the other operand is i64 (it would be truncated); write "
     "cast(const(7, i64), f32) * 0.9\n"},
    {"i = const(1, i32)\nx = i + 0.5", 2, 9,
     "error: literal 0.5 is a float but 'i' is i32 (it would be truncated); write cast(i, f32) + "
     "0.5\n"},
    {"x = 0.5 * const(1, i32)", 1, 5,
     "literal 0.5 is a float but the other operand is i32 (it would be truncated); write 0.5 * "
     "cast(..., f32)\n"},
    {"i = const(1, i32)\nx = i + 2.0", 2, 9, "literal 2.0 is a float but 'i' is i32"},
    {"x = const(1, u8) + 300", 1, 20,
     "error: integer literal 300 is out of range for u8 (0 to 255), the dtype of the other "
     "operand\n"},
    {"x = const(1, i32) + 3000000000", 1, 21,
     "error: integer literal 3000000000 is out of range for i32 (-2147483648 to 2147483647), the "
     "dtype of the other operand\n"},
    {"x = const(1, u8) - -1", 1, 20, "integer literal -1 is out of range for u8 (0 to 255)"},
    {"y = const(1, u8)\nx = y + [1, 300]", 2, 9,
     "integer literal 300 is out of range for u8 (0 to 255), the dtype of 'y'\n"},
    {"b = const(true)\nx = b == 2", 2, 10,
     "integer literal 2 is out of range for bool (0 to 1), the dtype of 'b'\n"},
    {"x = const(300, u8)", 1, 11, "error: integer literal 300 is out of range for u8 (0 to 255)\n"},
    {"x = const(2.5, i32)", 1, 11,
     "error: literal 2.5 is a float but the dtype asked for is i32 (it would be truncated)\n"},
    {"x = const(2.0)\ny = read_value(x)", 2, 16, "read_value: the argument must be a variable"},
    {"x = 1e39", 1, 5, "error: literal 1e+39 is out of range for f32 (largest 3.40282347e+38)\n"},
    {"x = 3.4028236e38", 1, 5, "literal 3.4028236e+38 is out of range for f32"},
    {"x = const(1.0) + 1e39", 1, 18, "literal 1e+39 is out of range for f32"},
    {"x = cond(2) { 1 } else { 2 }", 1, 10,
     "integer literal 2 is out of range for bool (0 to 1), the dtype of the condition\n"},
    {"i = const(3, i32)\nx = maximum(i, 0.5)", 2, 16,
     "error: literal 0.5 is a float but 'i' (input 0 of maximum) is i32 (it would be truncated)\n"},
    {"m = const([true, false])\nx = select(m, const([1, 2], i32), 0.5)", 2, 35,
     "literal 0.5 is a float but 'const' (input 1 of select) is i32"},
    {"v = variable(const(0, i64))\na = assign_add(v, 0.5)", 2, 19,
     "error: literal 0.5 is a float but variable 'v' is i64 (it would be truncated)\n"},
    {"s = while (s = const(0, i32); s < 10) { s = s + 0.5 }", 1, 49,
     "error: literal 0.5 is a float but 's' is i32 (it would be truncated); write cast(s, f32) + "
     "0.5\n"},
    {"s = while (s = const(0, i32); s < 10) { s = 0.5 }", 1, 41,
     "error: literal 0.5 is a float but loop variable 's' is i32 (it would be truncated)\n"},
    {"s = while (s = const(0, u8); s < 10) { s = 256 }", 1, 40,
     "integer literal 256 is out of range for u8 (0 to 255), the dtype of loop variable 's'\n"},
    {"s = while (s = const(0, i32); s < 10) { s = cast(s, f32) + 1 }", 1, 41,
     "error: loop variable 's' is i32 but the body makes it f32 (a loop variable keeps its dtype "
     "in every iteration: cast the new value, cast(..., i32))\n"},
    {"x = 3037000500 * 3037000500", 1, 16,
     "error: integer overflow in a constant expression (beyond 64 bits)\n"},
    {"x = 2 ** 63", 1, 7, "integer overflow in a constant expression"},
    {"x = 9223372036854775807 + 1", 1, 25, "integer overflow in a constant expression"},
    /* tuples from cond, def and bindings (item 8) */
    {"x = 1.0\na, b = cond(x > 2) { x, x } else { x, x, x }", 2, 36,
     "error: the else branch gives 3 values but the then branch gives 2\n"},
    {"x = 1.0\ny = cond(x > 2) { x, x } else { x }", 2, 33,
     "error: the else branch gives 1 value but the then branch gives 2\n"},
    {"x = 1.0\na, b = cond(x > 2) { x, x } else { x, const(1, i32) }", 2, 39,
     "error: value 2 of the cond is i32 in the else branch but f32 in the then branch (convert "
     "one, e.g. cast(..., i32), or write the literal as const(..., i32))\n"},
    {"x = 1.0\ny = cond(x > 2) { x } else { const(1, i32) }", 2, 30,
     "error: value of the cond is i32 in the else branch but f32 in the then branch"},
    {"x = 2\na, b = cond(x > 2) { x } else { -x }", 2, 1, "cannot unpack 1 value into 2 names"},
    {"x = 2\ny = cond(x > 2) { [x, x] } else { [x, x] }", 2, 19,
     "error: a branch's value is a tensor or several separated by ',' (x, y), not a list of "
     "tensors\n"},
    {"def f(x) { return x, x }\ny = f(2) + 1", 2, 5,
     "error: a tuple of 2 values where one tensor is expected (unpack it: a, b = ...)\n"},
    {"def f(x) { return x, x }\na, b, c = f(2)", 2, 1, "cannot unpack 2 values into 3 names"},
    {"a, b = 1, 2, 3", 1, 1, "cannot unpack 3 values into 2 names"},
    {"x = 1\nx + 1 = 3", 2, 1,
     "error: only names can be bound: the left of '=' is a name or names separated by ','\n"},
    {"x = 1\na, f(x) = 3, 4", 2, 4, "only names can be bound"},
    {"a, b = 1, ", 1, 11, "expected an expression, found end of file"},
    {"x = cond(true) { 1, } else { 2 }", 1, 21, "expected an expression, found '}'"},
    /* small items */
    {"x = zeros([-5, 3])", 1, 12,
     "error: attr 'shape' of zeros: dim 0 is negative (-5); a dim is an integer >= 0, or '?' when "
     "unknown\n"},
    {"n = 4\nx = ones([n, 2 - 4], i32)", 2, 16, "attr 'shape' of ones: dim 1 is negative (-2)"},
    {"x = ones([2, -1])", 1, 14,
     "error: ones: dim 1 is negative (-1); ones needs a known shape (dims >= 0)\n"},
    {"x = zeros([?, 2])", 1, 12, "error: zeros: dim 0 is '?'; zeros needs a known shape"},
};

static void check_case(const bad_case *c) {
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  gr_status st = gr_dsl_load_string("t.gr", c->src, g, NULL, &p, &err);
  GR_CHECK_MSG(st != GR_OK, "accepted: %s", c->src);
  if (st != GR_OK) {
    char want[64];
    snprintf(want, sizeof want, "t.gr:%d:%d: error: ", c->line, c->col);
    GR_CHECK_MSG(strncmp(err.msg, want, strlen(want)) == 0, "program:\n%s\nwant '%s', got:\n%s",
                 c->src, want, err.msg);
    GR_CHECK_MSG(strstr(err.msg, c->phrase) != NULL, "program:\n%s\nno '%s' in:\n%s", c->src,
                 c->phrase, err.msg);
    GR_CHECK_MSG(strchr(err.msg, '^') != NULL, "no caret in:\n%s", err.msg);
  }
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

static void test_table(void) {
  int n = (int)(sizeof cases / sizeof cases[0]);
  GR_CHECK(n >= 50);
  for (int i = 0; i < n; i++) check_case(&cases[i]);
}

/* The caret sits under the column, and an unclosed block notes where it opened. */
static void test_caret_and_note(void) {
  gr_graph *g = gr_graph_new();
  gr_error err;
  gr_dsl_load_string("m.gr", "x = 1\ny = relux(x)\n", g, NULL, NULL, &err);
  GR_CHECK_STR_CONTAINS(err.msg, "\n  y = relux(x)\n      ^");
  gr_graph_free(g);
  g = gr_graph_new();
  gr_dsl_load_string("m.gr", "scope \"a\" {\n  x = 1\n", g, NULL, NULL, &err);
  GR_CHECK_STR_CONTAINS(err.msg, "m.gr:1:11: note: '{' opened here");
  gr_graph_free(g);
}

/* A cond's branches that disagree show where both values are. */
static void test_cond_arity_note(void) {
  gr_error err;
  GR_CHECK(gt_dsl_error("x = 1.0\na, b = cond(x > 2) {\n  x, x\n} else {\n  x\n}", &err));
  GR_CHECK_STR_CONTAINS(err.msg,
                        "t.gr:5:3: error: the else branch gives 1 value but the then branch gives 2"
                        "\n    x\n    ^\n"
                        "t.gr:3:3: note: the then branch's values\n    x, x\n    ^");
}

/* Nesting deeper than the parser's limit is an error, not a stack overflow. */
static void test_deep_nesting(void) {
  char src[4096];
  int n = 0;
  n += snprintf(src + n, sizeof src - n, "x = ");
  for (int i = 0; i < 1000; i++) src[n++] = '(';
  src[n++] = '1';
  src[n] = '\0';
  gr_graph *g = gr_graph_new();
  gr_error err;
  GR_CHECK(gr_dsl_load_string("d.gr", src, g, NULL, NULL, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "nested too deeply");
  gr_graph_free(g);
  g = gr_graph_new();
  n = snprintf(src, sizeof src, "x = ");
  for (int i = 0; i < 2000; i++) src[n++] = '-';
  src[n++] = '1';
  src[n] = '\0';
  GR_CHECK(gr_dsl_load_string("d.gr", src, g, NULL, NULL, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "d.gr:1:204: error: nested too deeply: more than 200 levels of "
                                 "parentheses, brackets, blocks, unary operators or '**'");
  gr_graph_free(g);
  /* a right-associative '**' chain nests too: an error, not a stack overflow */
  char *chain = malloc(400005);
  n = snprintf(chain, 400005, "x = 1");
  for (int i = 0; i < 100000; i++) n += snprintf(chain + n, 400005 - (size_t)n, "**1");
  GR_CHECK(gt_dsl_error(chain, &err));
  GR_CHECK_STR_CONTAINS(err.msg, "error: nested too deeply: more than 200 levels");
  free(chain);
  /* 150 unary minus per call of a def calling itself: the evaluation limit */
  n = snprintf(src, sizeof src, "def f(x) { return ");
  for (int i = 0; i < 150; i++) src[n++] = '-';
  snprintf(src + n, sizeof src - (size_t)n, "f(x) }\ny = f(1)");
  GR_CHECK(gt_dsl_error(src, &err));
  GR_CHECK_STR_CONTAINS(err.msg, "error: expressions nested too deeply: more than 3000 levels of "
                                 "nested expressions, counting those inside the defs they call");
}

/* A flat chain of binary operators is not nesting, however long: 3,001 and
 * 100,000 terms on a tensor, and folded on a compile-time number. */
static void test_long_chains(void) {
  size_t cap = 100000 * 4 + 64;
  char *src = malloc(cap);
  const int terms[] = {3001, 100000};
  for (int k = 0; k < 2; k++) {
    int n = snprintf(src, cap, "x = const(1.0)\ny = x");
    for (int i = 1; i < terms[k]; i++) n += snprintf(src + n, cap - (size_t)n, " + x");
    GR_CHECK_NEAR(gt_dsl_value(src, "y"), terms[k], 0);
    n = snprintf(src, cap, "y = 1");
    for (int i = 1; i < terms[k]; i++) n += snprintf(src + n, cap - (size_t)n, "-1");
    GR_CHECK_NEAR(gt_dsl_value(src, "y"), 2 - terms[k], 0);
  }
  free(src);
}

/* Imports can be switched off for untrusted text. */
static void test_no_imports(void) {
  gr_graph *g = gr_graph_new();
  gr_error err;
  gr_dsl_options o = {.no_imports = true};
  GR_CHECK(gr_dsl_load_string("i.gr", "import \"/etc/passwd\"", g, &o, NULL, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "i.gr:1:1: error: imports are disabled");
  gr_graph_free(g);
}

/* Binary junk and NUL bytes are rejected with a position. */
static void test_binary_input(void) {
  const char junk[] = {'x', ' ', '=', ' ', '1', '\0', '2', '\xff'};
  gr_graph *g = gr_graph_new();
  gr_error err;
  GR_CHECK(gr_dsl_load_buffer("b.gr", junk, sizeof junk, g, NULL, NULL, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "b.gr:1:6: error: unexpected NUL byte");
  gr_graph_free(g);
}

/* A message filled up by notes (a def calling itself 64 deep) still ends
 * within its buffer, wherever the last caret line is cut (found by
 * fuzz-dsl: the caret's indentation could fill the buffer unterminated). */
static void test_full_message_terminated(void) {
  int cut_in_caret = 0;
  for (int k = 0; k < 300; k++) {
    char src[512];
    snprintf(src, sizeof src, "def f() {%*s return f() }\ny = f()\n", k, "");
    gr_error err;
    memset(err.msg, 'x', sizeof err.msg);
    GR_CHECK(gt_dsl_error(src, &err));
    GR_CHECK_MSG(memchr(err.msg, '\0', sizeof err.msg) != NULL, "k = %d: unterminated", k);
    const char *nul = memchr(err.msg, '\0', sizeof err.msg);
    if (nul && nul - err.msg == (long)sizeof err.msg - 1 && nul[-1] == ' ') cut_in_caret++;
  }
  GR_CHECK(cut_in_caret > 0); /* the case that was unterminated did occur */
}

/* A def calling itself with a long name: its name scopes outgrow the
 * limit before the call depth does; an error, not an endless search for a
 * free name (found by fuzz-dsl). */
static void test_long_scope_names(void) {
  gr_error err;
  GR_CHECK(gt_dsl_error("def partial_sum() { partial_sum() }\ns = partial_sum()\n", &err));
  GR_CHECK_STR_CONTAINS(err.msg, "is longer than 599 characters (calls nested too deep?)");
  GR_CHECK(gt_dsl_error("def f() { f() }\ns = f()\n", &err));
  GR_CHECK_STR_CONTAINS(err.msg, "calls nested deeper than 64");
}

int main(void) {
  GR_RUN(test_table);
  GR_RUN(test_long_scope_names);
  GR_RUN(test_full_message_terminated);
  GR_RUN(test_caret_and_note);
  GR_RUN(test_cond_arity_note);
  GR_RUN(test_deep_nesting);
  GR_RUN(test_long_chains);
  GR_RUN(test_no_imports);
  GR_RUN(test_binary_input);
  return gr_test_finish();
}
