/* Tests of the elementwise binary ops (ops/binary.c) against a reference
 * written here: random broadcast-compatible shape pairs of rank 0..4 (size-1
 * and zero-size dims, different ranks, partly unknown placeholder shapes),
 * every dtype, integer wrap-around, NaN handling, and the build and run
 * errors. Floats are checked against double arithmetic, integers against
 * exact wrapping arithmetic in uint64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

typedef gr_output (*bin_fn)(gr_graph *, gr_output, gr_output);
typedef enum kind { ARITH, COMPARE, LOGICAL } kind;
typedef enum opid { ADD, SUB, MUL, DIV, POW, MAX, MIN, EQ, NE, LT, LE, GT, GE, AND, OR, NOPS } opid;

static const struct {
  const char *name;
  bin_fn fn;
  kind k;
} ops[NOPS] = {
    {"add", gr_add, ARITH},
    {"sub", gr_sub, ARITH},
    {"mul", gr_mul, ARITH},
    {"div", gr_div, ARITH},
    {"pow", gr_pow, ARITH},
    {"maximum", gr_maximum, ARITH},
    {"minimum", gr_minimum, ARITH},
    {"equal", gr_equal, COMPARE},
    {"not_equal", gr_not_equal, COMPARE},
    {"less", gr_less, COMPARE},
    {"less_equal", gr_less_equal, COMPARE},
    {"greater", gr_greater, COMPARE},
    {"greater_equal", gr_greater_equal, COMPARE},
    {"logical_and", gr_logical_and, LOGICAL},
    {"logical_or", gr_logical_or, LOGICAL},
};

static const gr_dtype all_dtypes[] = {GR_F32, GR_F64, GR_I32, GR_I64, GR_U8, GR_BOOL};

static bool op_accepts(opid op, gr_dtype dt) {
  if (ops[op].k == LOGICAL) return dt == GR_BOOL;
  if (ops[op].k == COMPARE) return true;
  return dt != GR_BOOL;
}

/* ---- raw element access (exact for i64) ----------------------------------------- */

/* Reduces v to the dtype's range, as wrap-around does. */
static int64_t wrap(gr_dtype dt, uint64_t v) {
  switch (dt) {
    case GR_I32:
      return (int32_t)(uint32_t)v;
    case GR_U8:
      return (uint8_t)v;
    case GR_BOOL:
      return v != 0;
    default:
      return (int64_t)v;
  }
}

/* ---- random operands ------------------------------------------------------------ */

typedef enum vmode { V_SMALL, V_WIDE, V_TIES, V_NONZERO, V_POW_BASE, V_POW_EXP } vmode;

static void fill(gt_rng *r, gr_tensor *t, vmode m) {
  int64_t n = gr_tensor_num_elements(t);
  bool flt = gr_dtype_is_float(t->dtype);
  for (int64_t i = 0; i < n; i++) {
    if (flt) {
      double v;
      switch (m) {
        case V_TIES:
          v = (double)gt_int(r, -3, 3);
          break;
        case V_NONZERO:
          v = gt_uniform(r, 0.25, 8) * (gt_next(r) & 1 ? 1 : -1);
          break;
        case V_POW_BASE:
          v = gt_uniform(r, 0.1, 4);
          break;
        case V_POW_EXP:
          v = gt_uniform(r, -3, 3);
          break;
        case V_WIDE:
          v = gt_uniform(r, -1e6, 1e6);
          break;
        default:
          v = gt_uniform(r, -10, 10);
          break;
      }
      gr_tensor_set_f64(t, i, v);
      continue;
    }
    bool u8 = t->dtype == GR_U8;
    uint64_t v;
    switch (m) {
      case V_WIDE:
        v = gt_next(r);
        break;
      case V_TIES:
        v = (uint64_t)gt_int(r, u8 ? 0 : -3, 3);
        break;
      case V_NONZERO:
        v = (uint64_t)gt_int(r, 1, u8 ? 255 : 50);
        if (!u8 && (gt_next(r) & 1)) v = (uint64_t) - (int64_t)v;
        break;
      case V_POW_BASE:
        v = (uint64_t)gt_int(r, u8 ? 0 : -5, 5);
        break;
      case V_POW_EXP:
        v = (uint64_t)gt_int(r, u8 ? 0 : -3, 40);
        break;
      default:
        v = (uint64_t)gt_int(r, u8 ? 0 : -100, 100);
        break;
    }
    gt_set_wrapped(t, i, v);
  }
}

/* ---- reference -------------------------------------------------------------------- */

/* A comparison's result from the order of x and y (c: -1, 0 or 1);
 * unordered (a NaN): only not_equal holds. */
static bool compared(opid op, int c, bool unordered) {
  if (unordered) return op == NE;
  switch (op) {
    case EQ:
      return c == 0;
    case NE:
      return c != 0;
    case LT:
      return c < 0;
    case LE:
      return c <= 0;
    case GT:
      return c > 0;
    default:
      return c >= 0;
  }
}

static double ref_float(opid op, double x, double y) {
  if (ops[op].k == COMPARE) return compared(op, (x > y) - (x < y), isnan(x) || isnan(y));
  switch (op) {
    case ADD:
      return x + y;
    case SUB:
      return x - y;
    case MUL:
      return x * y;
    case DIV:
      return x / y;
    case POW:
      return pow(x, y);
    case MAX:
      return isnan(x) || isnan(y) ? NAN : x > y ? x : y;
    case MIN:
      return isnan(x) || isnan(y) ? NAN : x < y ? x : y;
    case AND:
      return x != 0 && y != 0;
    default:
      return x != 0 || y != 0;
  }
}

/* Exact integer reference; *zero set on division by zero. */
static int64_t ref_int(opid op, gr_dtype dt, int64_t x, int64_t y, bool *zero) {
  if (ops[op].k == COMPARE) return compared(op, (x > y) - (x < y), false);
  uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
  switch (op) {
    case ADD:
      return wrap(dt, ux + uy);
    case SUB:
      return wrap(dt, ux - uy);
    case MUL:
      return wrap(dt, ux * uy);
    case DIV:
      if (y == 0) {
        *zero = true;
        return 0;
      }
      if (y == -1) return wrap(dt, 0 - ux); /* also INT_MIN / -1 */
      return wrap(dt, (uint64_t)(x / y));
    case POW: {
      if (y < 0) return x == 1 ? 1 : x == -1 ? (y % 2 ? -1 : 1) : 0;
      uint64_t p = 1;
      for (int64_t k = 0; k < y; k++) p *= ux;
      return wrap(dt, p);
    }
    case MAX:
      return x > y ? x : y;
    case MIN:
      return x < y ? x : y;
    case AND:
      return x && y;
    default:
      return x || y;
  }
}

/* NumPy broadcast of two fully known shapes (false when incompatible). */
static bool ref_bcast(const gr_shape *a, const gr_shape *b, gr_shape *out) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  *out = gr_shape_make(r, NULL);
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out->dims[i] = da == 1 ? db : da;
  }
  return true;
}

/* Flat index into x of the element broadcast to output multi-index idx. */
static int64_t src_index(const gr_shape *x, const gr_shape *out, const int64_t *idx) {
  int64_t f = 0;
  for (int i = 0; i < x->rank; i++) {
    int64_t d = x->dims[i], k = idx[out->rank - x->rank + i];
    f = f * d + (d == 1 ? 0 : k);
  }
  return f;
}

/* The expected result of op on a and b (shapes must broadcast). */
static gr_tensor reference(opid op, const gr_tensor *a, const gr_tensor *b, bool *zero) {
  gr_shape os;
  ref_bcast(&a->shape, &b->shape, &os);
  gr_dtype odt = ops[op].k == ARITH ? a->dtype : GR_BOOL;
  gr_tensor w = gt_zeros(odt, os);
  int64_t n = gr_shape_num_elements(&os), idx[GR_MAX_RANK];
  for (int64_t i = 0; i < n; i++) {
    gt_unravel(&os, i, idx);
    int64_t ia = src_index(&a->shape, &os, idx), ib = src_index(&b->shape, &os, idx);
    if (gr_dtype_is_float(a->dtype)) {
      double v = ref_float(op, gr_tensor_get_f64(a, ia), gr_tensor_get_f64(b, ib));
      gr_tensor_set_f64(&w, i, v);
    } else {
      int64_t v = ref_int(op, a->dtype, gt_get_int(a, ia), gt_get_int(b, ib), zero);
      gt_set_wrapped(&w, i, (uint64_t)v);
    }
  }
  return w;
}

/* ---- random shapes ------------------------------------------------------------------ */

/* An operand shape for output shape os: a suffix of it, each dim maybe 1. */
static gr_shape operand_shape(gt_rng *r, const gr_shape *os) {
  int rank = (int)gt_int(r, 0, os->rank);
  gr_shape s = gr_shape_make(rank, NULL);
  for (int i = 0; i < rank; i++) {
    s.dims[i] = os->dims[os->rank - rank + i];
    if (gt_int(r, 0, 2) == 0) s.dims[i] = 1;
  }
  return s;
}

static void random_pair(gt_rng *r, gr_shape *a, gr_shape *b) {
  gr_shape os = gt_random_shape(r, (int)gt_int(r, 0, 4), 5);
  if (os.rank > 0 && gt_int(r, 0, 9) == 0) os.dims[gt_int(r, 0, os.rank - 1)] = 0;
  *a = operand_shape(r, &os);
  *b = operand_shape(r, &os);
  if (gt_next(r) & 1) *a = os; /* often one operand has the full shape */
}

/* A placeholder shape for s: known, some dims unknown, or unknown rank. */
static gr_shape static_shape(gt_rng *r, const gr_shape *s) {
  int m = (int)gt_int(r, 0, 5);
  if (m == 0) return gr_shape_unknown();
  gr_shape p = *s;
  if (m == 1)
    for (int i = 0; i < p.rank; i++)
      if (gt_next(r) & 1) p.dims[i] = -1;
  return p;
}

/* ---- running ---------------------------------------------------------------------------- */

/* Builds placeholder shapes pa, pb, applies op through its builder and runs
 * it fed with a and b. *inferred gets the build-time output shape. */
static gr_status run_bin(opid op, const gr_tensor *a, const gr_tensor *b, gr_shape pa, gr_shape pb,
                         gr_tensor *out, gr_shape *inferred, gr_error *err) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "a", a->dtype, pa), y = gr_placeholder(g, "b", b->dtype, pb);
  gr_output o = ops[op].fn(g, x, y);
  *out = gr_tensor_empty();
  gr_status s;
  if (gr_graph_error(g)) {
    *err = *gr_graph_error(g);
    s = err->code;
  } else {
    if (inferred) *inferred = o.node->out_shapes[0];
    gr_feed feeds[2] = {{x, a}, {y, b}};
    gr_session_options opts = {.inter_op_threads = 1};
    gr_session *sess = gr_session_new(g, &opts, err);
    s = sess ? gr_session_run(sess, feeds, 2, &o, 1, out, NULL, 0, err) : err->code;
    gr_session_free(sess);
  }
  gr_graph_free(g);
  return s;
}

static gr_tensor copy_of(const gr_tensor *t) {
  gr_tensor c;
  gr_error e;
  if (gr_tensor_copy(t, &c, &e) != GR_OK) return gr_tensor_empty();
  return c;
}

static bool same_bytes(const gr_tensor *a, const gr_tensor *b) {
  return memcmp(gr_tensor_data(a), gr_tensor_data(b), gr_tensor_num_bytes(a)) == 0;
}

static double rtol_for(opid op, gr_dtype dt) {
  if (dt != GR_F32) return 0;
  return op == POW ? 2e-6 : 1e-6;
}

static void check_case(gt_rng *r, opid op, gr_dtype dt, vmode ma, vmode mb, int *ran) {
  gr_shape sa, sb;
  random_pair(r, &sa, &sb);
  gr_tensor a = gt_zeros(dt, sa), b = gt_zeros(dt, sb);
  fill(r, &a, ma);
  fill(r, &b, mb);
  if (gr_dtype_is_float(dt) && (op == MAX || op == MIN || ops[op].k == COMPARE)) {
    if (gr_tensor_num_elements(&a) > 1) gr_tensor_set_f64(&a, 0, NAN);
    if (gr_tensor_num_elements(&b) > 2) gr_tensor_set_f64(&b, 1, NAN);
  }
  gr_tensor ca = copy_of(&a), cb = copy_of(&b), out;
  gr_shape inferred, pa = static_shape(r, &sa), pb = static_shape(r, &sb);
  gr_error err;
  bool zero = false;
  gr_tensor want = reference(op, &a, &b, &zero);
  gr_status s = run_bin(op, &a, &b, pa, pb, &out, &inferred, &err);
  char x[GR_SHAPE_STR_MAX], y[GR_SHAPE_STR_MAX];
  GR_CHECK_MSG(s == GR_OK, "%s %s %s %s: %s", ops[op].name, gr_dtype_name(dt), gr_shape_str(&sa, x),
               gr_shape_str(&sb, y), err.msg);
  if (s == GR_OK) {
    GR_CHECK_MSG(gt_near(&out, &want, rtol_for(op, dt), 0), "%s %s %s %s", ops[op].name,
                 gr_dtype_name(dt), gr_shape_str(&sa, x), gr_shape_str(&sb, y));
    GR_CHECK(gr_shape_compatible(&inferred, &want.shape));
    if (pa.rank >= 0 && pb.rank >= 0) GR_CHECK_EQ_INT(inferred.rank, want.shape.rank);
    if (gr_shape_is_fully_known(&pa) && gr_shape_is_fully_known(&pb))
      GR_CHECK(gr_shape_equal(&inferred, &want.shape));
    (*ran)++;
  }
  GR_CHECK_MSG(same_bytes(&a, &ca) && same_bytes(&b, &cb), "%s modified a fed input", ops[op].name);
  gr_tensor_release(&a);
  gr_tensor_release(&b);
  gr_tensor_release(&ca);
  gr_tensor_release(&cb);
  gr_tensor_release(&out);
  gr_tensor_release(&want);
}

static void test_random_all(void) {
  gt_rng r = {2024};
  int ran = 0;
  for (int op = 0; op < NOPS; op++)
    for (size_t d = 0; d < sizeof all_dtypes / sizeof all_dtypes[0]; d++) {
      gr_dtype dt = all_dtypes[d];
      if (!op_accepts(op, dt)) continue;
      for (int c = 0; c < 24; c++) {
        vmode ma = V_SMALL, mb = V_SMALL;
        if (op == DIV) mb = V_NONZERO;
        if (op == POW) ma = V_POW_BASE, mb = V_POW_EXP;
        if (ops[op].k == COMPARE || op == MAX || op == MIN) ma = mb = c % 2 ? V_TIES : V_SMALL;
        if (c % 3 == 0 && (op == ADD || op == SUB || op == MUL || op == MAX || op == MIN))
          ma = mb = V_WIDE;
        if (c % 3 == 0 && op == DIV) ma = V_WIDE;
        if (c % 4 == 0 && ops[op].k == COMPARE && !gr_dtype_is_float(dt)) ma = mb = V_WIDE;
        check_case(&r, op, dt, ma, mb, &ran);
      }
    }
  GR_CHECK(ran > 1000);
}

/* ---- fixed cases -------------------------------------------------------------------------- */

/* Runs op on 1-D operands given as int64 values of dtype dt. */
static gr_status run_ints(opid op, gr_dtype dt, int n, const int64_t *xa, const int64_t *xb,
                          gr_tensor *out, gr_error *err) {
  gr_shape s = gr_shape_make(1, (int64_t[]){n});
  gr_tensor a = gt_zeros(dt, s), b = gt_zeros(dt, s);
  for (int i = 0; i < n; i++) {
    gt_set_wrapped(&a, i, (uint64_t)xa[i]);
    gt_set_wrapped(&b, i, (uint64_t)xb[i]);
  }
  gr_status st = run_bin(op, &a, &b, s, s, out, NULL, err);
  gr_tensor_release(&a);
  gr_tensor_release(&b);
  return st;
}

static void expect_ints(opid op, gr_dtype dt, int n, const int64_t *xa, const int64_t *xb,
                        const int64_t *want) {
  gr_tensor out;
  gr_error err;
  GR_CHECK_OK(run_ints(op, dt, n, xa, xb, &out, &err), err);
  if (!out.buf) return;
  for (int i = 0; i < n; i++)
    GR_CHECK_MSG(gt_get_int(&out, i) == want[i], "%s %s [%d]: %lld, want %lld", ops[op].name,
                 gr_dtype_name(dt), i, (long long)gt_get_int(&out, i), (long long)want[i]);
  gr_tensor_release(&out);
}

static void test_wraparound(void) {
  expect_ints(ADD, GR_I32, 3, (int64_t[]){INT32_MAX, INT32_MIN, INT32_MAX},
              (int64_t[]){1, -1, INT32_MAX}, (int64_t[]){INT32_MIN, INT32_MAX, -2});
  expect_ints(SUB, GR_I32, 2, (int64_t[]){INT32_MIN, 0}, (int64_t[]){1, INT32_MIN},
              (int64_t[]){INT32_MAX, INT32_MIN});
  expect_ints(MUL, GR_I32, 2, (int64_t[]){INT32_MIN, 65536}, (int64_t[]){-1, 65536},
              (int64_t[]){INT32_MIN, 0});
  expect_ints(DIV, GR_I32, 4, (int64_t[]){INT32_MIN, 7, -7, 7}, (int64_t[]){-1, -2, 2, 2},
              (int64_t[]){INT32_MIN, -3, -3, 3});
  expect_ints(ADD, GR_I64, 2, (int64_t[]){INT64_MAX, INT64_MIN}, (int64_t[]){1, -1},
              (int64_t[]){INT64_MIN, INT64_MAX});
  expect_ints(MUL, GR_I64, 1, (int64_t[]){INT64_MIN}, (int64_t[]){-1}, (int64_t[]){INT64_MIN});
  expect_ints(DIV, GR_I64, 1, (int64_t[]){INT64_MIN}, (int64_t[]){-1}, (int64_t[]){INT64_MIN});
  expect_ints(SUB, GR_I64, 1, (int64_t[]){INT64_MIN}, (int64_t[]){1}, (int64_t[]){INT64_MAX});
  expect_ints(ADD, GR_U8, 2, (int64_t[]){255, 200}, (int64_t[]){1, 100}, (int64_t[]){0, 44});
  expect_ints(SUB, GR_U8, 1, (int64_t[]){0}, (int64_t[]){1}, (int64_t[]){255});
  expect_ints(MUL, GR_U8, 1, (int64_t[]){16}, (int64_t[]){17}, (int64_t[]){16});
  expect_ints(POW, GR_I32, 6, (int64_t[]){2, 2, 3, -1, 1, 0}, (int64_t[]){31, 32, -1, -3, -5, 0},
              (int64_t[]){INT32_MIN, 0, 0, -1, 1, 1});
  expect_ints(POW, GR_I64, 2, (int64_t[]){2, -2}, (int64_t[]){63, 3}, (int64_t[]){INT64_MIN, -8});
  expect_ints(POW, GR_U8, 2, (int64_t[]){2, 3}, (int64_t[]){8, 5}, (int64_t[]){0, 243});
  expect_ints(MAX, GR_I64, 1, (int64_t[]){INT64_MIN}, (int64_t[]){INT64_MAX},
              (int64_t[]){INT64_MAX});
  expect_ints(LT, GR_I64, 1, (int64_t[]){INT64_MAX - 1}, (int64_t[]){INT64_MAX}, (int64_t[]){1});
}

static void test_float_specials(void) {
  gr_shape s = gr_shape_make(1, (int64_t[]){4});
  for (int d = 0; d < 2; d++) {
    gr_dtype dt = d ? GR_F64 : GR_F32;
    gr_tensor a = gt_make(dt, s, (double[]){1, -1, 0, NAN});
    gr_tensor b = gt_make(dt, s, (double[]){0, 0, 0, 1});
    gr_tensor out;
    gr_error err;
    GR_CHECK_OK(run_bin(DIV, &a, &b, s, s, &out, NULL, &err), err);
    if (out.buf) {
      GR_CHECK(isinf(gr_tensor_get_f64(&out, 0)) && gr_tensor_get_f64(&out, 0) > 0);
      GR_CHECK(isinf(gr_tensor_get_f64(&out, 1)) && gr_tensor_get_f64(&out, 1) < 0);
      GR_CHECK(isnan(gr_tensor_get_f64(&out, 2)) && isnan(gr_tensor_get_f64(&out, 3)));
      gr_tensor_release(&out);
    }
    /* NaN wins in maximum and minimum, on either side */
    for (int op = MAX; op <= MIN; op++) {
      GR_CHECK_OK(run_bin(op, &a, &b, s, s, &out, NULL, &err), err);
      if (out.buf) GR_CHECK(isnan(gr_tensor_get_f64(&out, 3)));
      gr_tensor_release(&out);
      GR_CHECK_OK(run_bin(op, &b, &a, s, s, &out, NULL, &err), err);
      if (out.buf) GR_CHECK(isnan(gr_tensor_get_f64(&out, 3)));
      gr_tensor_release(&out);
    }
    gr_tensor_release(&a);
    gr_tensor_release(&b);
  }
}

/* A chain of ops on intermediates (in-place forwarding) gives the right values. */
static void test_chain(void) {
  gt_rng r = {5};
  gr_shape s = gr_shape_make(2, (int64_t[]){6, 7}), row = gr_shape_make(1, (int64_t[]){7});
  gr_tensor xv = gt_random(&r, GR_F64, s, -5, 5), rv = gt_random(&r, GR_F64, row, -5, 5);
  gr_tensor keep = copy_of(&xv);
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F64, s), v = gr_placeholder(g, "v", GR_F64, row);
  gr_output y = gr_add(g, x, v);
  y = gr_mul(g, y, gr_const_f64(g, 2));
  y = gr_sub(g, gr_const_f64(g, 1), y);
  y = gr_maximum(g, y, x); /* x is still read here: y must not overwrite it */
  gr_feed feeds[2] = {{x, &xv}, {v, &rv}};
  gr_error err;
  gr_session *sess = gr_session_new(g, NULL, &err);
  gr_tensor out;
  GR_CHECK_OK(gr_session_run(sess, feeds, 2, &y, 1, &out, NULL, 0, &err), err);
  if (out.buf) {
    for (int i = 0; i < 42; i++) {
      double xi = gr_tensor_get_f64(&keep, i), vi = gr_tensor_get_f64(&rv, i % 7);
      GR_CHECK_NEAR(gr_tensor_get_f64(&out, i), fmax(1 - 2 * (xi + vi), xi), 1e-12);
    }
    gr_tensor_release(&out);
  }
  GR_CHECK(same_bytes(&xv, &keep));
  gr_session_free(sess);
  gr_graph_free(g);
  gr_tensor_release(&xv);
  gr_tensor_release(&rv);
  gr_tensor_release(&keep);
}

/* ---- errors -------------------------------------------------------------------------------- */

static void test_int_div_by_zero(void) {
  const gr_dtype dts[] = {GR_I32, GR_I64, GR_U8};
  for (int d = 0; d < 3; d++) {
    gr_tensor out;
    gr_error err;
    gr_status s = run_ints(DIV, dts[d], 3, (int64_t[]){4, 5, 6}, (int64_t[]){2, 0, 3}, &out, &err);
    GR_CHECK_EQ_INT(s, GR_ERR_INVALID_ARGUMENT);
    GR_CHECK_STR_CONTAINS(err.msg, "node 'div'");
    GR_CHECK_STR_CONTAINS(err.msg, "division by zero");
    GR_CHECK(out.buf == NULL);
  }
  /* through broadcasting: a scalar zero */
  gr_tensor a = gt_make(GR_I32, gr_shape_make(2, (int64_t[]){2, 2}), (double[]){1, 2, 3, 4});
  gr_tensor b = gt_make(GR_I32, gr_shape_scalar(), (double[]){0}), out;
  gr_error err;
  GR_CHECK_EQ_INT(run_bin(DIV, &a, &b, a.shape, b.shape, &out, NULL, &err),
                  GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'div'");
  gr_tensor_release(&a);
  gr_tensor_release(&b);
}

static void expect_build_error(opid op, gr_dtype da, gr_shape sa, gr_dtype db, gr_shape sb,
                               gr_status code, const char *sub1, const char *sub2) {
  gr_graph *g = gr_graph_new();
  gr_output o = ops[op].fn(g, gr_placeholder(g, "a", da, sa), gr_placeholder(g, "b", db, sb));
  const gr_error *e = gr_graph_error(g);
  GR_CHECK(o.node == NULL && e != NULL);
  if (e) {
    GR_CHECK_MSG(e->code == code, "%s: %s", gr_status_name(e->code), e->msg);
    GR_CHECK_STR_CONTAINS(e->msg, "node '");
    GR_CHECK_STR_CONTAINS(e->msg, ops[op].name);
    GR_CHECK_STR_CONTAINS(e->msg, sub1);
    GR_CHECK_STR_CONTAINS(e->msg, sub2);
  }
  gr_graph_free(g);
}

static void test_build_errors(void) {
  gr_shape s23 = gr_shape_make(2, (int64_t[]){2, 3}), s4 = gr_shape_make(1, (int64_t[]){4});
  gr_shape s513 = gr_shape_make(3, (int64_t[]){5, 1, 3}), s42 = gr_shape_make(2, (int64_t[]){4, 2});
  gr_shape q3 = gr_shape_make(2, (int64_t[]){-1, 3}), s3 = gr_shape_make(1, (int64_t[]){3});
  for (int op = 0; op < NOPS; op++) {
    gr_dtype dt = ops[op].k == LOGICAL ? GR_BOOL : GR_F32;
    expect_build_error(op, dt, s23, dt, s4, GR_ERR_SHAPE, "[2, 3]", "[4]");
    expect_build_error(op, dt, s513, dt, s42, GR_ERR_SHAPE, "[5, 1, 3]", "[4, 2]");
    expect_build_error(op, dt, q3, dt, s4, GR_ERR_SHAPE, "[?, 3]", "[4]");
    if (ops[op].k != LOGICAL) {
      expect_build_error(op, GR_F32, s3, GR_F64, s3, GR_ERR_DTYPE, "f32", "f64");
      expect_build_error(op, GR_I32, s3, GR_I64, s3, GR_ERR_DTYPE, "i32", "i64");
    }
  }
  for (int op = ADD; op <= MIN; op++)
    expect_build_error(op, GR_BOOL, s3, GR_BOOL, s3, GR_ERR_DTYPE, "bool", "expected");
  for (int op = AND; op <= OR; op++) {
    expect_build_error(op, GR_F32, s3, GR_F32, s3, GR_ERR_DTYPE, "f32", "bool");
    expect_build_error(op, GR_BOOL, s3, GR_I32, s3, GR_ERR_DTYPE, "i32", "bool");
  }
}

/* Partly known shapes: inference keeps what is known; a conflict only seen at
 * run time is an error naming the node. */
static void test_partial_shapes(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_placeholder(g, "a", GR_F32, gr_shape_make(2, (int64_t[]){-1, 3}));
  gr_output b = gr_placeholder(g, "b", GR_F32, gr_shape_make(1, (int64_t[]){-1}));
  gr_output c = gr_placeholder(g, "c", GR_F32, gr_shape_make(3, (int64_t[]){4, 1, 1}));
  gr_output u = gr_placeholder(g, "u", GR_F32, gr_shape_unknown());
  gr_output ab = gr_add(g, a, b), ac = gr_mul(g, a, c), au = gr_less(g, a, u);
  GR_CHECK(!gr_graph_error(g));
  if (gr_graph_error(g)) return;
  char buf[GR_SHAPE_STR_MAX];
  GR_CHECK_STR_CONTAINS(gr_shape_str(&ab.node->out_shapes[0], buf), "[?, 3]");
  GR_CHECK_STR_CONTAINS(gr_shape_str(&ac.node->out_shapes[0], buf), "[4, ?, 3]");
  GR_CHECK_EQ_INT(au.node->out_shapes[0].rank, -1);
  GR_CHECK_EQ_INT(au.node->out_dtypes[0], GR_BOOL);
  gr_tensor av = gt_zeros(GR_F32, gr_shape_make(2, (int64_t[]){2, 3}));
  gr_tensor bv = gt_zeros(GR_F32, gr_shape_make(1, (int64_t[]){4}));
  gr_feed feeds[2] = {{a, &av}, {b, &bv}};
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_tensor out;
  GR_CHECK_EQ_INT(gr_session_run(s, feeds, 2, &ab, 1, &out, NULL, 0, &err), GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'add'");
  GR_CHECK_STR_CONTAINS(err.msg, "[2, 3]");
  GR_CHECK_STR_CONTAINS(err.msg, "[4]");
  gr_session_free(s);
  gr_graph_free(g);
  gr_tensor_release(&av);
  gr_tensor_release(&bv);
}

int main(void) {
  GR_RUN(test_random_all);
  GR_RUN(test_wraparound);
  GR_RUN(test_float_specials);
  GR_RUN(test_chain);
  GR_RUN(test_int_div_by_zero);
  GR_RUN(test_build_errors);
  GR_RUN(test_partial_shapes);
  return gr_test_finish();
}
