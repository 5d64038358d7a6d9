/* Gradients checked by finite differences: for every op with a gradient,
 * f64 inputs of random shapes, loss = sum(op(x) * R) for a random R, and the
 * gradient from gr_gradients compared with central differences. The same at
 * orders 2 and 3: the loss becomes sum(d loss / dx * R') for a random R', so
 * its gradient (second derivatives, built from the ops gradients emit) is
 * compared with differences of the first-derivative graph. Plus a whole
 * small MLP, unconnected inputs, and error cases. */
#include <graphrun.h>
#include <math.h>
#include <stdlib.h>

#include "gr_test.h"
#include "test_util.h"

#define MAXIN 4

typedef struct spec {
  int n;
  gr_shape shape[MAXIN];
  gr_dtype dtype[MAXIN];
  double lo[MAXIN], hi[MAXIN];
  bool away_from_zero[MAXIN]; /* |x| >= 0.2: for kinks (relu, abs) */
  int64_t k;                  /* op-specific integer (axis, ...) */
} spec;

typedef gr_output (*build_fn)(gr_graph *g, const gr_output *x, const spec *s);

static gt_rng rng = {2024};

static gr_tensor make_input(const spec *s, int i) {
  gr_tensor t = gt_random(&rng, s->dtype[i], s->shape[i], s->lo[i], s->hi[i]);
  if (s->away_from_zero[i])
    for (int64_t k = 0; k < gr_tensor_num_elements(&t); k++) {
      double v = gr_tensor_get_f64(&t, k);
      if (fabs(v) < 0.2) gr_tensor_set_f64(&t, k, v < 0 ? v - 0.2 : v + 0.2);
    }
  return t;
}

/* sum(y * R) for a random R of y's (known) shape. */
static gr_output random_weighted_sum(gr_graph *g, gr_output y) {
  gr_tensor r = gt_random(&rng, GR_F64, y.node->out_shapes[y.index], -1, 1);
  gr_output s = gr_reduce_sum(g, gr_mul(g, y, gr_const(g, &r)), NULL, 0, false);
  gr_tensor_release(&r);
  return s;
}

/* Builds op(x), loss = sum(op(x) * R), and checks d loss / d x_i for float
 * inputs; at order > 1 the loss is first replaced order - 1 times by
 * sum_i sum(d loss / d x_i * R_i), so the gradient checked is an order-th
 * derivative. Checked on 1 device and with the nodes (the gradients' too)
 * spread round robin over 3, where it must equal the 1-device one bit for
 * bit. */
static void check_order(const char *name, const spec *s, build_fn build, int order) {
  gr_graph *g = gr_graph_new();
  gr_output x[MAXIN];
  gr_tensor v[MAXIN];
  gr_feed f[MAXIN];
  for (int i = 0; i < s->n; i++) {
    char nm[8];
    snprintf(nm, sizeof nm, "x%d", i);
    x[i] = gr_placeholder(g, nm, s->dtype[i], s->shape[i]);
    v[i] = make_input(s, i);
    f[i] = (gr_feed){x[i], &v[i]};
  }
  gr_output y = build(g, x, s);
  if (!y.node) {
    GR_CHECK_MSG(false, "%s: build failed: %s", name, gr_graph_error(g)->msg);
    goto out;
  }
  gr_shape ys = y.node->out_shapes[y.index];
  GR_CHECK_MSG(gr_shape_is_fully_known(&ys), "%s: output shape unknown", name);
  gr_output loss = random_weighted_sum(g, y);
  gr_output xs[MAXIN], dx[MAXIN];
  int nx = 0, which[MAXIN];
  for (int i = 0; i < s->n; i++)
    if (s->dtype[i] == GR_F64) {
      which[nx] = i;
      xs[nx++] = x[i];
    }
  for (int k = 1; k < order; k++) {
    GR_CHECK_MSG(gr_gradients(g, &loss, 1, xs, nx, NULL, false, dx) == GR_OK,
                 "%s: order %d: gradients: %s", name, k, gr_graph_error(g)->msg);
    if (gr_graph_error(g)) goto out;
    gr_output terms[MAXIN];
    for (int i = 0; i < nx; i++) terms[i] = random_weighted_sum(g, dx[i]);
    loss = gr_add_n(g, terms, nx);
  }
  gr_status st = gr_gradients(g, &loss, 1, xs, nx, NULL, false, dx);
  GR_CHECK_MSG(st == GR_OK, "%s: order %d: gradients: %s", name, order,
               gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  if (st != GR_OK) goto out;
  /* on 1 device, then spread round robin over 3: the same gradients, bit for bit */
  gr_tensor grads[2][MAXIN];
  bool ran[2] = {false, false};
  for (int d = 0; d < 2; d++) {
    int devices = d ? 3 : 1;
    gr_error err;
    if (devices > 1) gt_spread(g, devices);
    gr_session *sess = gt_session(g, devices, 1);
    gr_status rs = gr_session_run(sess, f, s->n, dx, nx, grads[d], NULL, 0, &err);
    GR_CHECK_MSG(rs == GR_OK, "%s: order %d, %d device(s): %s", name, order, devices, err.msg);
    if (rs != GR_OK) {
      gr_session_free(sess);
      continue;
    }
    ran[d] = true;
    /* (higher orders of a linear op are constants: nothing to send) */
    GR_CHECK_MSG(devices == 1 || order > 1 || gr_session_last_transfers(sess).sends > 0,
                 "%s: nothing crossed devices", name);
    for (int k = 0; d && ran[0] && k < nx; k++)
      GR_CHECK_MSG(gt_bit_equal(&grads[1][k], &grads[0][k]),
                   "%s: order %d: d/d x%d on 3 devices differs from 1 device", name, order,
                   which[k]);
    const double eps = 1e-6;
    int bad = 0;
    for (int k = 0; k < nx && !bad; k++) {
      gr_tensor *t = &v[which[k]];
      gr_tensor orig;
      gr_tensor_copy(t, &orig, &err);
      for (int64_t e = 0; e < gr_tensor_num_elements(t) && !bad; e++) {
        double x0 = gr_tensor_get_f64(&orig, e);
        gr_tensor_set_f64(t, e, x0 + eps);
        double lp = gt_run_scalar(sess, f, s->n, loss);
        gr_tensor_set_f64(t, e, x0 - eps);
        double lm = gt_run_scalar(sess, f, s->n, loss);
        gr_tensor_set_f64(t, e, x0);
        double num = (lp - lm) / (2 * eps), ana = gr_tensor_get_f64(&grads[d][k], e);
        if (!(fabs(num - ana) <= 1e-5 + 1e-4 * fabs(num))) {
          GR_CHECK_MSG(false,
                       "%s: order %d, %d device(s): d/d x%d[%lld]: analytic %.10g, numeric %.10g",
                       name, order, devices, which[k], (long long)e, ana, num);
          bad = 1;
        }
      }
      gr_tensor_release(&orig);
    }
    gr_session_free(sess);
  }
  for (int d = 0; d < 2; d++)
    for (int k = 0; ran[d] && k < nx; k++) gr_tensor_release(&grads[d][k]);
out:
  for (int i = 0; i < s->n; i++) gr_tensor_release(&v[i]);
  gr_graph_free(g);
}

/* First, second and third derivatives. */
static void check(const char *name, const spec *s, build_fn build) {
  for (int order = 1; order <= 3; order++) check_order(name, s, build, order);
}

/* ---- specs ---------------------------------------------------------------------- */

static spec floats(int n, const gr_shape *shapes, double lo, double hi) {
  spec s = {.n = n};
  for (int i = 0; i < n; i++) {
    s.shape[i] = shapes[i];
    s.dtype[i] = GR_F64;
    s.lo[i] = lo;
    s.hi[i] = hi;
  }
  return s;
}
static gr_shape rs(int rank) {
  return gt_random_shape(&rng, rank, 4);
}
/* b: a shape a broadcasts with (some dims 1, maybe lower rank) */
static gr_shape bcast_of(gr_shape a) {
  gr_shape b = a;
  for (int i = 0; i < a.rank; i++)
    if (gt_int(&rng, 0, 2) == 0) b.dims[i] = 1;
  if (a.rank > 1 && gt_int(&rng, 0, 1)) {
    b.rank--;
    for (int i = 0; i < b.rank; i++) b.dims[i] = b.dims[i + 1];
  }
  return b;
}

/* ---- builders --------------------------------------------------------------------- */

#define B2(NAME, EXPR)                                                                             \
  static gr_output NAME(gr_graph *g, const gr_output *x, const spec *s) {                          \
    (void)s;                                                                                       \
    return EXPR;                                                                                   \
  }
B2(b_add, gr_add(g, x[0], x[1]))
B2(b_sub, gr_sub(g, x[0], x[1]))
B2(b_mul, gr_mul(g, x[0], x[1]))
B2(b_div, gr_div(g, x[0], x[1]))
B2(b_pow, gr_pow(g, x[0], x[1]))
B2(b_maximum, gr_maximum(g, x[0], x[1]))
B2(b_minimum, gr_minimum(g, x[0], x[1]))
B2(b_neg, gr_neg(g, x[0]))
B2(b_abs, gr_abs(g, x[0]))
B2(b_exp, gr_exp(g, x[0]))
B2(b_log, gr_log(g, x[0]))
B2(b_sqrt, gr_sqrt(g, x[0]))
B2(b_square, gr_square(g, x[0]))
B2(b_cast, gr_cast(g, gr_mul(g, gr_cast(g, x[0], GR_F64), x[0]), GR_F64))
B2(b_select, gr_select(g, gr_greater(g, x[0], gr_const_f64(g, 0)), x[1], x[2]))
B2(b_add_n, gr_add_n(g, x, 3))
B2(b_identity, gr_identity(g, x[0]))
B2(b_mm_nn, gr_matmul(g, x[0], x[1], false, false))
B2(b_mm_tn, gr_matmul(g, x[0], x[1], true, false))
B2(b_mm_nt, gr_matmul(g, x[0], x[1], false, true))
B2(b_mm_tt, gr_matmul(g, x[0], x[1], true, true))
B2(b_mm_add, gr_matmul_add(g, x[0], x[1], x[2], s->k & 1, s->k & 2))
B2(b_relu, gr_relu(g, x[0]))
B2(b_sigmoid, gr_sigmoid(g, x[0]))
B2(b_tanh, gr_tanh(g, x[0]))
B2(b_softmax, gr_softmax(g, x[0]))
B2(b_log_softmax, gr_log_softmax(g, x[0]))
B2(b_bias_add, gr_bias_add(g, x[0], x[1]))
B2(b_xent, gr_softmax_cross_entropy(g, x[0], gr_softmax(g, x[1])))
B2(b_sparse_xent, gr_sparse_softmax_cross_entropy(g, x[0], x[1]))
B2(b_gather, gr_gather(g, x[0], x[1], s->k))
B2(b_transpose, gr_transpose(g, x[0], NULL, 0))
B2(b_expand_dims, gr_expand_dims(g, x[0], s->k))
B2(b_squeeze, gr_squeeze(g, gr_expand_dims(g, x[0], 1), NULL, 0))
B2(b_concat, gr_concat(g, x, 2, s->k))
B2(b_split, gr_add(g, gr_split(g, x[0], 2, s->k), gr_output_at(gr_split(g, x[0], 2, s->k), 1)))

static int64_t pick_axes(const spec *s, int64_t *axes) {
  int n = 0;
  for (int i = 0; i < s->shape[0].rank; i++)
    if ((s->k >> i) & 1) axes[n++] = i - (i % 2 ? s->shape[0].rank : 0); /* mix negative axes */
  return n;
}
#define BRED(NAME, OP, KEEP)                                                                       \
  static gr_output NAME(gr_graph *g, const gr_output *x, const spec *s) {                          \
    int64_t axes[GR_MAX_RANK];                                                                     \
    int n = (int)pick_axes(s, axes);                                                               \
    return OP(g, x[0], axes, n, KEEP);                                                             \
  }
BRED(b_sum, gr_reduce_sum, false)
BRED(b_sum_keep, gr_reduce_sum, true)
BRED(b_mean, gr_reduce_mean, false)
BRED(b_mean_keep, gr_reduce_mean, true)
BRED(b_max, gr_reduce_max, false)
BRED(b_min, gr_reduce_min, true)
BRED(b_prod, gr_reduce_prod, false)

static gr_output b_reshape(gr_graph *g, const gr_output *x, const spec *s) {
  int64_t n = gr_shape_num_elements(&s->shape[0]);
  return gr_reshape(g, x[0], (gr_shape){2, {n, -1}});
}
static gr_output b_slice(gr_graph *g, const gr_output *x, const spec *s) {
  int64_t b[GR_MAX_RANK], z[GR_MAX_RANK];
  for (int i = 0; i < s->shape[0].rank; i++) {
    b[i] = gt_int(&rng, 0, s->shape[0].dims[i] - 1);
    z[i] = i % 2 ? -1 : gt_int(&rng, 1, s->shape[0].dims[i] - b[i]);
  }
  return gr_slice(g, x[0], b, z, s->shape[0].rank);
}
static gr_output b_tile(gr_graph *g, const gr_output *x, const spec *s) {
  int64_t m[GR_MAX_RANK];
  for (int i = 0; i < s->shape[0].rank; i++) m[i] = gt_int(&rng, 1, 3);
  return gr_tile(g, x[0], m, s->shape[0].rank);
}
static gr_output b_pad(gr_graph *g, const gr_output *x, const spec *s) {
  int64_t p[2 * GR_MAX_RANK];
  for (int i = 0; i < 2 * s->shape[0].rank; i++) p[i] = gt_int(&rng, 0, 2);
  return gr_pad(g, x[0], p, s->shape[0].rank, 0.5);
}

/* ---- tests ------------------------------------------------------------------------ */

static void binary_case(const char *name, build_fn f, double lo, double hi, double blo,
                        double bhi) {
  for (int rep = 0; rep < 3; rep++) {
    gr_shape a = rs((int)gt_int(&rng, 0, 3)), b = bcast_of(a);
    if (rep == 1) {
      gr_shape t = a;
      a = b;
      b = t;
    } /* broadcast either side */
    spec s = floats(2, (gr_shape[]){a, b}, lo, hi);
    s.lo[1] = blo;
    s.hi[1] = bhi;
    check(name, &s, f);
  }
}
static void unary_case(const char *name, build_fn f, double lo, double hi, bool away) {
  for (int rep = 0; rep < 2; rep++) {
    spec s = floats(1, (gr_shape[]){rs((int)gt_int(&rng, 0, 3))}, lo, hi);
    s.away_from_zero[0] = away;
    check(name, &s, f);
  }
}

static void test_binary(void) {
  binary_case("add", b_add, -1, 1, -1, 1);
  binary_case("sub", b_sub, -1, 1, -1, 1);
  binary_case("mul", b_mul, -1, 1, -1, 1);
  binary_case("div", b_div, -1, 1, 0.5, 2);
  binary_case("pow", b_pow, 0.5, 2, -1.5, 1.5);
  binary_case("maximum", b_maximum, -1, 1, -1, 1);
  binary_case("minimum", b_minimum, -1, 1, -1, 1);
}
static void test_unary(void) {
  unary_case("neg", b_neg, -1, 1, false);
  unary_case("abs", b_abs, -1, 1, true);
  unary_case("exp", b_exp, -1, 1, false);
  unary_case("log", b_log, 0.3, 2, false);
  unary_case("sqrt", b_sqrt, 0.3, 2, false);
  unary_case("square", b_square, -1, 1, false);
  unary_case("cast", b_cast, -1, 1, false);
  unary_case("identity", b_identity, -1, 1, false);
  unary_case("relu", b_relu, -1, 1, true);
  unary_case("sigmoid", b_sigmoid, -3, 3, false);
  unary_case("tanh", b_tanh, -2, 2, false);
}
static void test_select_add_n(void) {
  gr_shape a = rs(2);
  spec s = floats(3, (gr_shape[]){a, a, bcast_of(a)}, -1, 1);
  check("select", &s, b_select);
  s = floats(3, (gr_shape[]){a, a, a}, -1, 1);
  check("add_n", &s, b_add_n);
}
static void test_matmul(void) {
  build_fn f[4] = {b_mm_nn, b_mm_tn, b_mm_nt, b_mm_tt};
  const char *names[4] = {"matmul", "matmul_ta", "matmul_tb", "matmul_ta_tb"};
  for (int t = 0; t < 4; t++) {
    int64_t m = gt_int(&rng, 1, 4), k = gt_int(&rng, 1, 4), n = gt_int(&rng, 1, 4);
    gr_shape a = t & 1 ? (gr_shape){2, {k, m}} : (gr_shape){2, {m, k}};
    gr_shape b = t & 2 ? (gr_shape){2, {n, k}} : (gr_shape){2, {k, n}};
    spec s = floats(2, (gr_shape[]){a, b}, -1, 1);
    check(names[t], &s, f[t]);
    /* matmul_add: c + op(a) op(b), the same transposes */
    spec sa = floats(3, (gr_shape[]){{2, {m, n}}, a, b}, -1, 1);
    sa.k = t;
    check("matmul_add", &sa, b_mm_add);
  }
}
static void test_reductions(void) {
  build_fn f[7] = {b_sum, b_sum_keep, b_mean, b_mean_keep, b_max, b_min, b_prod};
  const char *names[7] = {"reduce_sum",           "reduce_sum_keepdims", "reduce_mean",
                          "reduce_mean_keepdims", "reduce_max",          "reduce_min_keepdims",
                          "reduce_prod"};
  for (int i = 0; i < 7; i++)
    for (int rep = 0; rep < 2; rep++) {
      spec s =
          floats(1, (gr_shape[]){rs((int)gt_int(&rng, 1, 3))}, i == 6 ? 0.5 : -1, i == 6 ? 1.5 : 1);
      s.k = gt_int(&rng, 0, 7); /* bit mask of axes; 0 = all */
      check(names[i], &s, f[i]);
    }
}
static void test_shape_ops(void) {
  spec s = floats(1, (gr_shape[]){rs(3)}, -1, 1);
  check("reshape", &s, b_reshape);
  check("transpose", &s, b_transpose);
  check("squeeze", &s, b_squeeze);
  s.k = -1;
  check("expand_dims", &s, b_expand_dims);
  check("slice", &s, b_slice);
  check("tile", &s, b_tile);
  check("pad", &s, b_pad);
  gr_shape a = rs(3), b = a;
  b.dims[1] = gt_int(&rng, 1, 4);
  s = floats(2, (gr_shape[]){a, b}, -1, 1);
  s.k = 1;
  check("concat", &s, b_concat);
  gr_shape c = rs(2);
  c.dims[1] = 2 * gt_int(&rng, 1, 3);
  s = floats(1, (gr_shape[]){c}, -1, 1);
  s.k = -1;
  check("split", &s, b_split);
  s = floats(2, (gr_shape[]){(gr_shape){2, {5, 3}}, (gr_shape){2, {2, 3}}}, -1, 1);
  s.dtype[1] = GR_I64;
  s.lo[1] = 0;
  s.hi[1] = 4;
  s.k = 0;
  check("gather", &s, b_gather); /* repeated indices accumulate */
}
static void test_nn(void) {
  spec s = floats(1, (gr_shape[]){rs(2)}, -2, 2);
  check("softmax", &s, b_softmax);
  check("log_softmax", &s, b_log_softmax);
  gr_shape x = rs(3);
  s = floats(2, (gr_shape[]){x, (gr_shape){1, {x.dims[2]}}}, -1, 1);
  check("bias_add", &s, b_bias_add);
  gr_shape l = (gr_shape){2, {gt_int(&rng, 1, 4), gt_int(&rng, 2, 5)}};
  s = floats(2, (gr_shape[]){l, l}, -2, 2);
  check("softmax_cross_entropy", &s, b_xent);
  s = floats(2, (gr_shape[]){l, (gr_shape){1, {l.dims[0]}}}, -2, 2);
  s.dtype[1] = GR_I64;
  s.lo[1] = 0;
  s.hi[1] = (double)(l.dims[1] - 1);
  check("sparse_softmax_cross_entropy", &s, b_sparse_xent);
}

/* A 2-layer MLP: every parameter's gradient against finite differences. */
static gr_output b_mlp(gr_graph *g, const gr_output *x, const spec *s) {
  gr_output h = gr_tanh(g, gr_bias_add(g, gr_matmul(g, x[0], x[1], false, false), x[2]));
  gr_output logits = gr_matmul(g, h, x[3], false, false);
  int64_t labels[3] = {0, 2, 1};
  gr_output y = gr_const_data(g, GR_I64, (gr_shape){1, {3}}, labels);
  return gr_reduce_mean(g, gr_sparse_softmax_cross_entropy(g, logits, y), NULL, 0, false);
}
static void test_whole_mlp(void) {
  spec s = floats(4, (gr_shape[]){{2, {3, 4}}, {2, {4, 5}}, {1, {5}}, {2, {5, 3}}}, -1, 1);
  check("mlp", &s, b_mlp);
}

/* ---- chains: derivatives of compositions --------------------------------------------- */

static gr_output b_poly(gr_graph *g, const gr_output *x, const spec *s) { /* x^3 - 2x^2 + x/2 */
  (void)s;
  gr_output cube = gr_mul(g, gr_mul(g, x[0], x[0]), x[0]);
  gr_output sq2 = gr_mul(g, gr_const_f64(g, 2), gr_square(g, x[0]));
  return gr_add(g, gr_sub(g, cube, sq2), gr_div(g, x[0], gr_const_f64(g, 2)));
}
B2(b_mm_chain, gr_matmul(g, gr_tanh(g, gr_matmul(g, x[0], x[1], false, false)), x[2], false, true))
B2(b_bcast_chain,
   gr_sub(g, gr_mul(g, gr_sigmoid(g, gr_mul(g, x[0], x[1])), gr_exp(g, x[1])), gr_log(g, x[0])))
B2(b_gather_chain, gr_mul(g, gr_gather(g, gr_tanh(g, x[0]), x[1], 0), gr_gather(g, x[0], x[1], 0)))
/* each reduction's upstream gradient depends on x through the other */
B2(b_reductions_chain, gr_mul(g, gr_reduce_mean(g, x[0], (int64_t[]){0}, 1, true),
                              gr_reduce_sum(g, x[0], (int64_t[]){1}, 1, true)))
/* the loss's upstream gradient depends on the logits too */
B2(b_xent_chain, gr_mul(g, gr_sparse_softmax_cross_entropy(g, x[0], x[1]),
                        gr_tanh(g, gr_reduce_sum(g, x[0], (int64_t[]){-1}, 1, false))))
B2(b_reduce_chain, gr_div(g, gr_reduce_prod(g, gr_exp(g, x[0]), (int64_t[]){-1}, 1, true),
                          gr_reduce_sum(g, gr_square(g, x[0]), NULL, 0, false)))

static void test_chains(void) {
  spec s = floats(1, (gr_shape[]){rs(2)}, -1.5, 1.5);
  check("x^3 - 2x^2 + x/2", &s, b_poly);
  int64_t m = gt_int(&rng, 1, 4), k = gt_int(&rng, 1, 4), n = gt_int(&rng, 1, 4);
  s = floats(3, (gr_shape[]){{2, {m, k}}, {2, {k, n}}, {2, {2, n}}}, -1, 1);
  check("matmul(tanh(matmul(a, b)), c^T)", &s, b_mm_chain);
  gr_shape a = rs(3);
  s = floats(2, (gr_shape[]){a, bcast_of(a)}, 0.5, 2);
  check("sigmoid(a b) exp(b) - log(a), broadcasting", &s, b_bcast_chain);
  s = floats(2, (gr_shape[]){(gr_shape){2, {4, 3}}, (gr_shape){1, {5}}}, -1, 1);
  s.dtype[1] = GR_I64;
  s.lo[1] = 0;
  s.hi[1] = 3;
  check("gather(tanh(p), i) gather(p, i)", &s, b_gather_chain);
  s = floats(2, (gr_shape[]){{2, {3, 4}}, {1, {3}}}, -2, 2);
  s.dtype[1] = GR_I64;
  s.lo[1] = 0;
  s.hi[1] = 3;
  check("sparse_softmax_cross_entropy(l, y) tanh(sum(l))", &s, b_xent_chain);
  s = floats(1, (gr_shape[]){{2, {3, 4}}}, -1, 1);
  check("reduce_mean(x, 0) reduce_sum(x, 1)", &s, b_reductions_chain);
  s = floats(1, (gr_shape[]){{2, {3, 4}}}, -1, 1); /* groups of 4: the product's upstream */
  check("reduce_prod(exp(x)) / reduce_sum(x^2)", &s, b_reduce_chain); /* depends on x */
}

/* Runs the n names of src on 1 device (into t[0]) and spread round robin
 * over 3 (into t[1]), where the values must cross devices and equal the
 * 1-device ones bit for bit. false when a run fails (nothing is held then). */
static bool run_on_1_and_3(const char *src, const char *names, int n, gr_tensor t[2][4]) {
  for (int d = 0; d < 2; d++) {
    int64_t sends = 0;
    if (!gt_dsl_run_on(src, names, d ? 3 : 1, t[d], &sends)) {
      GR_CHECK_MSG(false, "%s: %d device(s)", src, d ? 3 : 1);
      for (int k = 0; d && k < n; k++) gr_tensor_release(&t[0][k]);
      return false;
    }
    GR_CHECK_MSG(!d || sends > 0, "%s: nothing crossed devices", src);
  }
  for (int k = 0; k < n; k++)
    GR_CHECK_MSG(gt_bit_equal(&t[1][k], &t[0][k]), "%s: value %d on 3 devices", src, k);
  return true;
}

static void release_1_and_3(gr_tensor t[2][4], int n) {
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < n; k++) gr_tensor_release(&t[d][k]);
}

/* x^3 and its derivatives in f64 at x + shift. */
static const char *cube_src(double shift) {
  static char src[512];
  snprintf(src, sizeof src,
           "x = identity(const([1.0, -2.0, 0.5], f64) + %.17g)\n"
           "d1 = gradients(x * x * x, x)\n"
           "d2 = gradients(reduce_sum(d1), x)\n"
           "d3 = gradients(reduce_sum(d2), x)\n",
           shift);
  return src;
}

/* The reproducer: d/dx sum(d(x^3)/dx) = 6x, built in the DSL; then
 * in f64 up to the third derivative (6), the second against central
 * differences of the first (each d1[i] depends on x[i] only, so shifting
 * every element at once gives every d d1[i] / d x[i]). Each on 1 device
 * and spread over 3. */
static void test_second_derivative_in_dsl(void) {
  const double xv[3] = {1.0, -2.0, 0.5}, h = 1e-5;
  gr_tensor t[2][4];
  if (run_on_1_and_3("x = const([1.0, -2.0, 0.5])\n"
                     "d1 = gradients(x * x * x, x)\n"
                     "d2 = gradients(reduce_sum(d1), x)\n",
                     "d1,d2", 2, t)) {
    for (int d = 0; d < 2; d++)
      for (int i = 0; i < 3; i++) {
        GR_CHECK_NEAR(gr_tensor_get_f64(&t[d][0], i), 3 * xv[i] * xv[i], 1e-6);
        GR_CHECK_NEAR(gr_tensor_get_f64(&t[d][1], i), 6 * xv[i], 1e-6);
      }
    release_1_and_3(t, 2);
  }
  gr_tensor hi[2][4], lo[2][4];
  bool ok = run_on_1_and_3(cube_src(0), "d1,d2,d3", 3, t);
  bool got_hi = run_on_1_and_3(cube_src(h), "d1", 1, hi);
  bool got_lo = run_on_1_and_3(cube_src(-h), "d1", 1, lo), shifted = got_hi && got_lo;
  for (int d = 0; d < 2 && ok; d++)
    for (int i = 0; i < 3; i++) {
      GR_CHECK_NEAR(gr_tensor_get_f64(&t[d][0], i), 3 * xv[i] * xv[i], 1e-12);
      GR_CHECK_NEAR(gr_tensor_get_f64(&t[d][1], i), 6 * xv[i], 1e-12);
      GR_CHECK_NEAR(gr_tensor_get_f64(&t[d][2], i), 6, 1e-12);
      double fd =
          shifted ? (gr_tensor_get_f64(&hi[d][0], i) - gr_tensor_get_f64(&lo[d][0], i)) / (2 * h)
                  : NAN;
      GR_CHECK_MSG(fabs(gr_tensor_get_f64(&t[d][1], i) - fd) <= 1e-6,
                   "%d device(s): d2[%d] = %.10g, differences %.10g", d ? 3 : 1, i,
                   gr_tensor_get_f64(&t[d][1], i), fd);
    }
  if (ok) release_1_and_3(t, 3);
  if (got_hi) release_1_and_3(hi, 1);
  if (got_lo) release_1_and_3(lo, 1);
}

/* Hessian-vector products of an MLP loss: Hv = d(g . v)/dw against the
 * central difference of the gradient along v, (g(w + eps v) - g(w - eps v)) / 2 eps,
 * on 1 device and spread round robin over 3 (Hv bit-identical to 1 device's). */
static void hvp_case(const char *name, bool relu, bool sparse) {
  enum { NP = 4 };
  const gr_shape ps[NP] = {{2, {3, 5}}, {1, {5}}, {2, {5, 4}}, {1, {4}}};
  gr_graph *g = gr_graph_new();
  gr_tensor xt = gt_random(&rng, GR_F64, (gr_shape){2, {6, 3}}, -2, 2);
  gr_output X = gr_const(g, &xt), w[NP], grads[NP], hv[NP], terms[NP];
  gr_tensor wt[NP], vt[NP];
  gr_feed f[NP];
  for (int i = 0; i < NP; i++) {
    char nm[8];
    snprintf(nm, sizeof nm, "w%d", i);
    w[i] = gr_placeholder(g, nm, GR_F64, ps[i]);
    wt[i] = gt_random(&rng, GR_F64, ps[i], -1, 1);
    vt[i] = gt_random(&rng, GR_F64, ps[i], -1, 1);
    f[i] = (gr_feed){w[i], &wt[i]};
  }
  gr_output pre = gr_bias_add(g, gr_matmul(g, X, w[0], false, false), w[1]);
  gr_output h = relu ? gr_relu(g, pre) : gr_tanh(g, pre);
  gr_output logits = gr_bias_add(g, gr_matmul(g, h, w[2], false, false), w[3]);
  gr_output per_example;
  if (sparse) {
    int64_t labels[6] = {0, 3, 1, 2, 2, 0};
    per_example = gr_sparse_softmax_cross_entropy(
        g, logits, gr_const_data(g, GR_I64, (gr_shape){1, {6}}, labels));
  } else {
    gr_tensor lt = gt_random(&rng, GR_F64, (gr_shape){2, {6, 4}}, -1, 1);
    per_example = gr_softmax_cross_entropy(g, logits, gr_softmax(g, gr_const(g, &lt)));
    gr_tensor_release(&lt);
  }
  gr_output loss = gr_reduce_mean(g, per_example, NULL, 0, false);
  GR_CHECK(gr_gradients(g, &loss, 1, w, NP, NULL, false, grads) == GR_OK);
  for (int i = 0; i < NP; i++)
    terms[i] = gr_reduce_sum(g, gr_mul(g, grads[i], gr_const(g, &vt[i])), NULL, 0, false);
  gr_output gv = gr_add_n(g, terms, NP);
  GR_CHECK(gr_gradients(g, &gv, 1, w, NP, NULL, false, hv) == GR_OK);
  gr_tensor w0[NP], hv1[NP]; /* w; Hv on 1 device */
  gr_error err;
  for (int i = 0; i < NP; i++) gr_tensor_copy(&wt[i], &w0[i], &err);
  const double eps = 1e-5;
  bool have1 = false;
  for (int d = 0; d < 2; d++) { /* on 1 device, then spread over 3 */
    int devices = d ? 3 : 1;
    gr_tensor got[NP], gpm[2][NP];
    bool ok[3];
    int64_t sends = 0;
    for (int i = 0; i < NP; i++) /* back to w (the feeds hold wt) */
      for (int64_t e = 0; e < gr_tensor_num_elements(&wt[i]); e++)
        gr_tensor_set_f64(&wt[i], e, gr_tensor_get_f64(&w0[i], e));
    ok[0] = gt_run_on(g, devices, f, NP, hv, NP, got, &sends);
    for (int side = 0; side < 2; side++) { /* the gradient at w + eps v, then at w - eps v */
      double sign = side ? -1 : 1;
      for (int i = 0; i < NP; i++)
        for (int64_t e = 0; e < gr_tensor_num_elements(&wt[i]); e++)
          gr_tensor_set_f64(
              &wt[i], e, gr_tensor_get_f64(&w0[i], e) + sign * eps * gr_tensor_get_f64(&vt[i], e));
      ok[1 + side] = gt_run_on(g, devices, f, NP, grads, NP, gpm[side], NULL);
    }
    GR_CHECK_MSG(ok[0] && ok[1] && ok[2], "%s: %d device(s)", name, devices);
    GR_CHECK_MSG(!ok[0] || devices == 1 || sends > 0, "%s: nothing crossed devices", name);
    int bad = 0;
    for (int i = 0; i < NP && ok[0] && ok[1] && ok[2]; i++)
      for (int64_t e = 0; e < gr_tensor_num_elements(&wt[i]) && !bad; e++) {
        double num =
            (gr_tensor_get_f64(&gpm[0][i], e) - gr_tensor_get_f64(&gpm[1][i], e)) / (2 * eps);
        double ana = gr_tensor_get_f64(&got[i], e);
        if (!(fabs(num - ana) <= 1e-6 + 1e-4 * fabs(num))) {
          GR_CHECK_MSG(false, "%s, %d device(s): (Hv) of w%d[%lld]: analytic %.10g, numeric %.10g",
                       name, devices, i, (long long)e, ana, num);
          bad = 1;
        }
      }
    for (int i = 0; i < NP && ok[0] && d && have1; i++)
      GR_CHECK_MSG(gt_bit_equal(&got[i], &hv1[i]), "%s: (Hv) of w%d on 3 devices", name, i);
    for (int i = 0; i < NP; i++) {
      if (ok[0] && !d) hv1[i] = got[i];
      if (ok[0] && d) gr_tensor_release(&got[i]);
      if (ok[1]) gr_tensor_release(&gpm[0][i]);
      if (ok[2]) gr_tensor_release(&gpm[1][i]);
    }
    have1 = have1 || (ok[0] && !d);
  }
  for (int i = 0; i < NP; i++) {
    if (have1) gr_tensor_release(&hv1[i]);
    gr_tensor_release(&w0[i]);
    gr_tensor_release(&wt[i]);
    gr_tensor_release(&vt[i]);
  }
  gr_tensor_release(&xt);
  gr_graph_free(g);
}
static void test_mlp_hessian_vector_products(void) {
  for (int rep = 0; rep < 2; rep++) {
    hvp_case("tanh MLP, sparse cross-entropy", false, true);
    hvp_case("tanh MLP, dense cross-entropy", false, false);
    hvp_case("relu MLP, sparse cross-entropy", true, true);
    hvp_case("relu MLP, dense cross-entropy", true, false);
  }
}

/* Every op with inputs says what its gradient is: a gradient function, or
 * GR_OP_NO_GRADIENT; only state updates have neither (an error on the path). */
static void test_every_op_decides(void) {
  gr_ops_register_all();
  int missing = 0;
  for (int i = 0; i < gr_op_registry_count(); i++) {
    const gr_op_def *op = gr_op_registry_at(i);
    if (gr_op_classify_gradient(op) != GR_OP_GRADIENT_MISSING) continue;
    missing++;
    GR_CHECK_MSG(op->flags & GR_OP_STATEFUL,
                 "op %s has inputs but neither a gradient function nor GR_OP_NO_GRADIENT",
                 op->name);
  }
  GR_CHECK(missing > 0); /* assign and the optimizers' updates */
  GR_CHECK(gr_op_classify_gradient(gr_op_registry_find("sum_like")) == GR_OP_GRADIENT_DEFINED);
  GR_CHECK(gr_op_classify_gradient(gr_op_registry_find("less")) == GR_OP_GRADIENT_STOPS);
  GR_CHECK(gr_op_classify_gradient(gr_op_registry_find("const")) == GR_OP_GRADIENT_SOURCE);
  GR_CHECK(gr_op_classify_gradient(gr_op_registry_find("assign")) == GR_OP_GRADIENT_MISSING);
}

static void test_unconnected_and_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_placeholder(g, "a", GR_F64, (gr_shape){1, {3}});
  gr_output b = gr_placeholder(g, "b", GR_F64, (gr_shape){1, {3}});
  gr_output y = gr_reduce_sum(g, gr_square(g, a), NULL, 0, false);
  gr_output d[2];
  GR_CHECK(gr_gradients(g, &y, 1, (gr_output[]){a, b}, 2, NULL, false, d) == GR_OK);
  GR_CHECK(d[1].node && strcmp(d[1].node->op->name, "zeros_like") == 0);
  GR_CHECK(gr_gradients(g, &y, 1, (gr_output[]){a, b}, 2, NULL, true, d) == GR_OK);
  GR_CHECK(d[0].node && d[1].node == NULL);
  /* gradient nodes are colocated with their forward nodes and scoped */
  GR_CHECK(d[0].node->colocate_with != NULL);
  GR_CHECK(strncmp(d[0].node->name, "gradients/", 10) == 0);
  /* stop_gradient blocks the flow */
  gr_output z = gr_reduce_sum(g, gr_mul(g, gr_stop_gradient(g, a), b), NULL, 0, false);
  GR_CHECK(gr_gradients(g, &z, 1, &a, 1, NULL, true, d) == GR_OK);
  GR_CHECK(d[0].node == NULL);
  /* an integer y carries no gradient (as TensorFlow): a is unconnected */
  gr_output i = gr_name(g, gr_argmax(g, a, 0), "best");
  GR_CHECK(gr_gradients(g, &i, 1, &a, 1, NULL, false, d) == GR_OK);
  GR_CHECK(d[0].node && strcmp(d[0].node->op->name, "zeros_like") == 0);
  GR_CHECK(gr_gradients(g, &i, 1, &a, 1, NULL, true, d) == GR_OK && d[0].node == NULL);
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_graph_free(g);
  /* an op without a gradient on the path names the op and node */
  g = gr_graph_new();
  a = gr_placeholder(g, "a", GR_F64, (gr_shape){1, {3}});
  gr_output v = gr_variable(g, "v", gr_zeros(g, GR_F64, (gr_shape){1, {3}}));
  gr_output asg = gr_name(g, gr_assign(g, v, a), "store");
  y = gr_reduce_sum(g, asg, NULL, 0, false);
  GR_CHECK(gr_gradients(g, &y, 1, &a, 1, NULL, false, d) == GR_ERR_UNIMPLEMENTED);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "'store'");
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "op assign");
  gr_graph_free(g);
  /* the same when the op is in a first derivative's graph (its seed): the second fails */
  g = gr_graph_new();
  a = gr_placeholder(g, "a", GR_F64, (gr_shape){1, {3}});
  v = gr_variable(g, "v", gr_zeros(g, GR_F64, (gr_shape){1, {3}}));
  gr_output seed = gr_name(g, gr_assign(g, v, a), "seed_store"), sq = gr_square(g, a), d1;
  GR_CHECK(gr_gradients(g, &sq, 1, &a, 1, &seed, false, &d1) == GR_OK);
  y = gr_reduce_sum(g, d1, NULL, 0, false);
  GR_CHECK(gr_gradients(g, &y, 1, &a, 1, NULL, false, d) == GR_ERR_UNIMPLEMENTED);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "'seed_store'");
  gr_graph_free(g);
}

/* Integer and bool ys (TensorFlow's rule, gradients_util.py: only float
 * edges carry a gradient back, so such a y reaches no x): they contribute
 * nothing, next to float ys or alone. They were refused. */
static void test_integer_ys(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_placeholder(g, "a", GR_F64, (gr_shape){1, {3}});
  gr_output f = gr_reduce_sum(g, gr_mul(g, gr_tanh(g, a), a), NULL, 0, false);
  gr_output best = gr_argmax(g, a, 0), small = gr_less(g, a, gr_const_f64(g, 0.5));
  gr_output asint = gr_cast(g, a, GR_I32),
            n = gr_cast(g, gr_reduce_sum(g, a, NULL, 0, false), GR_I64);
  gr_output mixed[5] = {best, f, small, asint, n}, ints[4] = {best, small, asint, n};
  gr_output seeds[5] = {gr_const_i64(g, 7), {NULL, 0}, {NULL, 0}, {NULL, 0}, {NULL, 0}};
  gr_output d[4], none[2];
  GR_CHECK(gr_gradients(g, mixed, 5, &a, 1, NULL, false, &d[0]) == GR_OK);
  GR_CHECK(gr_gradients(g, mixed, 5, &a, 1, seeds, false, &d[1]) == GR_OK); /* seed 7 ignored */
  GR_CHECK(gr_gradients(g, &f, 1, &a, 1, NULL, false, &d[2]) == GR_OK);
  /* no float y: every x unconnected (zeros, or null); also with no y at all */
  GR_CHECK(gr_gradients(g, ints, 4, &a, 1, NULL, false, &d[3]) == GR_OK);
  GR_CHECK(d[3].node && strcmp(d[3].node->op->name, "zeros_like") == 0);
  GR_CHECK(gr_gradients(g, ints, 4, (gr_output[]){a, asint}, 2, NULL, true, none) == GR_OK);
  GR_CHECK(none[0].node == NULL && none[1].node == NULL);
  GR_CHECK(gr_gradients(g, NULL, 0, &a, 1, NULL, true, none) == GR_OK && none[0].node == NULL);
  /* an integer x is unconnected too (TensorFlow returns None for it) */
  GR_CHECK(gr_gradients(g, mixed, 5, &asint, 1, NULL, true, none) == GR_OK && !none[0].node);
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_error err = {0};
  gr_session *sess = gt_session(g, 1, 1);
  double av[3] = {0.3, -0.8, 1.1};
  gr_tensor at = gt_make(GR_F64, (gr_shape){1, {3}}, av), out[4], fl[2];
  gr_feed feed = {a, &at};
  GR_CHECK_OK(gr_session_run(sess, &feed, 1, d, 4, out, NULL, 0, &err), err);
  GR_CHECK(gt_bit_equal(&out[0], &out[2]) && gt_bit_equal(&out[1], &out[2]));
  /* d f / d a by central differences */
  for (int e = 0; e < 3 && !err.msg[0]; e++) {
    const double h = 1e-6, x0 = av[e];
    for (int k = 0; k < 2; k++) {
      gr_tensor_set_f64(&at, e, k ? x0 - h : x0 + h);
      GR_CHECK_OK(gr_session_run(sess, &feed, 1, &f, 1, &fl[k], NULL, 0, &err), err);
    }
    gr_tensor_set_f64(&at, e, x0);
    double fd = (gr_tensor_get_f64(&fl[0], 0) - gr_tensor_get_f64(&fl[1], 0)) / (2 * h);
    GR_CHECK_NEAR(gr_tensor_get_f64(&out[0], e), fd, 1e-6);
    GR_CHECK_NEAR(gr_tensor_get_f64(&out[3], e), 0, 0);
    gr_tensor_release(&fl[0]), gr_tensor_release(&fl[1]);
  }
  for (int k = 0; k < 4; k++) gr_tensor_release(&out[k]);
  gr_tensor_release(&at);
  gr_session_free(sess);
  gr_graph_free(g);
  /* the same in a graph file; minimizing an integer loss stays an error,
   * as TensorFlow's optimizers raise one */
  GR_CHECK_NEAR(gt_dsl_value("x = const(3.0)\n"
                             "d = gradients([cast(x, i32), x * x], x)\n",
                             "d"),
                6, 0);
  GR_CHECK(gt_dsl_error("x = variable(3.0)\n"
                        "l = cast(x * x, i32)\n"
                        "t = minimize(l, sgd(0.1))\n",
                        &err));
  GR_CHECK_STR_CONTAINS(err.msg, "t.gr:3:5: error: minimize: loss 'l' has dtype i32; only an "
                                 "f32/f64 loss can be minimized");
  g = gr_graph_new();
  gr_output v = gr_variable(g, "v", gr_const_f64(g, 3));
  gr_sync_replicas_options o = {.optimizer = {.kind = GR_OPT_SGD, .learning_rate = 0.5},
                                .replicas_to_aggregate = 1};
  gr_sync_replicas sr;
  GR_CHECK(gr_sync_replicas_minimize(g, &o, gr_name(g, gr_cast(g, v, GR_I64), "il"), NULL, 0,
                                     &sr) == GR_ERR_DTYPE);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "sync_replicas: loss 'il' has dtype i64");
  gr_graph_free(g);
}

/* A weight shared by K products (micro-batches, uses of a shared layer):
 * its gradient's K products are summed as one product over the operands
 * concatenated along the contracted dimension, when they are all made on
 * one device. x[0] is the weight W, x[1..4]
 * the four operands; left: y_k = x_k @ W (dW = x_k^T dy_k), else
 * y_k = W @ x_k (dW = dy_k x_k^T). */
static bool shared_left;
static gr_output b_shared_weight(gr_graph *g, const gr_output *x, void *arg) {
  (void)arg;
  gr_output y[4];
  for (int k = 0; k < 4; k++)
    y[k] = shared_left ? gr_matmul(g, x[1 + k], x[0], false, false)
                       : gr_matmul(g, x[0], x[1 + k], false, false);
  return gr_add_n(g, y, 4);
}

/* "OP/INPUT_OP" of the gradient of the weight (p x q) shared by four
 * products of `rows` rows each. */
typedef struct op_pair {
  char s[64];
} op_pair;
static op_pair shared_weight_gradient(int64_t p, int64_t q, int64_t rows, const char *operands) {
  gr_graph *g = gr_graph_new();
  gr_output x[5];
  x[0] = gr_placeholder(g, "w", GR_F64, gr_shape_make(2, (int64_t[]){p, q}));
  if (operands) gr_graph_push_device_scope(g, operands);
  for (int k = 1; k < 5; k++)
    x[k] = gr_placeholder(g, NULL, GR_F64,
                          shared_left ? gr_shape_make(2, (int64_t[]){rows, p})
                                      : gr_shape_make(2, (int64_t[]){q, rows}));
  if (operands) gr_graph_pop_device_scope(g);
  gr_output y = gr_reduce_sum(g, b_shared_weight(g, x, NULL), NULL, 0, false), dw;
  GR_CHECK(gr_gradients(g, &y, 1, &x[0], 1, NULL, false, &dw) == GR_OK);
  op_pair r;
  const gr_node *n = dw.node;
  snprintf(r.s, sizeof r.s, "%s/%s", n ? n->op->name : "none",
           n && n->num_inputs ? n->inputs[0].node->op->name : "-");
  gr_graph_free(g);
  return r;
}

static void test_shared_weight_products(void) {
  for (int left = 0; left < 2; left++) {
    shared_left = left;
    /* 4 contributions of 16 x 16 from 4 rows each: one product over 16 rows */
    GR_CHECK_STR_CONTAINS(shared_weight_gradient(16, 16, 4, NULL).s, "matmul/concat");
    /* 4 contributions of 1 x 1 from 64 rows each: concatenating costs more */
    GR_CHECK_STR_CONTAINS(shared_weight_gradient(1, 1, 64, NULL).s, "add_n/");
    /* operands from another device (stages of a pipeline): each product is
     * added into one buffer as its operands arrive, in their order */
    GR_CHECK_STR_CONTAINS(shared_weight_gradient(16, 16, 4, gt_device_name(1)).s,
                          "matmul_add/matmul_add");
    gr_tensor in[5];
    in[0] = gt_random(&rng, GR_F64, gr_shape_make(2, (int64_t[]){6, 5}), -1, 1);
    for (int k = 1; k < 5; k++)
      in[k] = gt_random(
          &rng, GR_F64,
          left ? gr_shape_make(2, (int64_t[]){3, 6}) : gr_shape_make(2, (int64_t[]){5, 3}), -1, 1);
    GR_CHECK(gt_check_gradient(left ? "shared weight, x @ W" : "shared weight, W @ x",
                               b_shared_weight, NULL, in, 5, 1, 30, 1e-6));
    for (int k = 0; k < 5; k++) gr_tensor_release(&in[k]);
  }
}

/* The chain of a pipeline's weight gradient (operands on another device):
 * matmul_add links in the order the operands were made, and the value of
 * the K products' sum, run on two devices. */
static void test_chained_products(void) {
  enum { K = 4, ROWS = 3, P = 5, Q = 6 };
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, gt_device_name(0));
  gr_output w = gr_variable(g, "w", gr_zeros(g, GR_F64, gr_shape_make(2, (int64_t[]){P, Q})));
  gr_graph_pop_device_scope(g);
  gr_output x[K], y[K];
  gr_tensor xv[K], dyv[K];
  gr_feed f[2 * K];
  gr_output dy[K];
  for (int k = 0; k < K; k++) {
    gr_graph_push_device_scope(g, gt_device_name(1));
    x[k] = gr_placeholder(g, NULL, GR_F64, gr_shape_make(2, (int64_t[]){ROWS, P}));
    dy[k] = gr_placeholder(g, NULL, GR_F64, gr_shape_make(2, (int64_t[]){ROWS, Q}));
    gr_graph_pop_device_scope(g);
    xv[k] = gt_random(&rng, GR_F64, x[k].node->out_shapes[0], -1, 1);
    dyv[k] = gt_random(&rng, GR_F64, dy[k].node->out_shapes[0], -1, 1);
    f[2 * k] = (gr_feed){x[k], &xv[k]};
    f[2 * k + 1] = (gr_feed){dy[k], &dyv[k]};
  }
  /* the products in reverse order, so the chain's order is the walk's doing */
  for (int k = K - 1; k >= 0; k--) {
    gr_graph_push_device_scope(g, gt_device_name(0));
    y[k] = gr_matmul(g, x[k], w, false, false);
    gr_graph_pop_device_scope(g);
  }
  gr_output dw;
  GR_CHECK(gr_gradients(g, y, K, &w, 1, dy, false, &dw) == GR_OK);
  /* dw = ((x_0^T dy_0 + x_1^T dy_1) + ...): the last link adds x_{K-1} */
  const gr_node *n = dw.node;
  for (int k = K - 1; k > 0; k--) {
    GR_CHECK_MSG(n && strcmp(n->op->name, "matmul_add") == 0, "link %d: %s", k,
                 n ? n->op->name : "none");
    if (!n || strcmp(n->op->name, "matmul_add") != 0) break;
    GR_CHECK(n->inputs[1].node == x[k].node);
    n = n->inputs[0].node;
  }
  GR_CHECK(n && strcmp(n->op->name, "matmul") == 0 && n->inputs[0].node == x[0].node);
  gr_error err;
  gr_session *sess = gt_session(g, 2, 2);
  gr_tensor got = gr_tensor_empty();
  gr_status st = gr_session_run(sess, f, 2 * K, &dw, 1, &got, NULL, 0, &err);
  GR_CHECK_MSG(st == GR_OK, "%s", err.msg);
  for (int i = 0; st == GR_OK && i < P; i++)
    for (int j = 0; j < Q; j++) {
      double want = 0;
      for (int k = 0; k < K; k++)
        for (int r = 0; r < ROWS; r++)
          want += gr_tensor_get_f64(&xv[k], r * P + i) * gr_tensor_get_f64(&dyv[k], r * Q + j);
      GR_CHECK(fabs(gr_tensor_get_f64(&got, i * Q + j) - want) < 1e-12);
    }
  gr_tensor_release(&got);
  for (int k = 0; k < K; k++) gr_tensor_release(&xv[k]), gr_tensor_release(&dyv[k]);
  gr_session_free(sess);
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_shared_weight_products);
  GR_RUN(test_chained_products);
  GR_RUN(test_binary);
  GR_RUN(test_unary);
  GR_RUN(test_select_add_n);
  GR_RUN(test_matmul);
  GR_RUN(test_reductions);
  GR_RUN(test_shape_ops);
  GR_RUN(test_nn);
  GR_RUN(test_whole_mlp);
  GR_RUN(test_chains);
  GR_RUN(test_second_derivative_in_dsl);
  GR_RUN(test_mlp_hessian_vector_products);
  GR_RUN(test_every_op_decides);
  GR_RUN(test_unconnected_and_errors);
  GR_RUN(test_integer_ys);
  return gr_test_finish();
}
