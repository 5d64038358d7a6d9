/* Gradients where the conventions of docs/ops.md decide: at zeros
 * (reduce_prod, pow), at ties (maximum, minimum, reduce_max, reduce_min)
 * and at kinks (relu, abs), with the exact values expected there; and
 * prod_others, the op reduce_prod's derivatives are built from, against a
 * brute-force reference on random inputs with many zeros. Every expected
 * value is checked on 1 device and spread round robin over 3 (bit-identical),
 * and reduce_prod and pow at zeros also by finite differences, orders 1 to
 * 3, on 1 and 3 devices (issue 19, item 10). (one_hot's row of off_value for
 * an index out of range is checked in test_ops_array_index.c; finite
 * differences away from these points in test_gradients.c.) */
#include <graphrun.h>
#include <math.h>
#include <stdlib.h>

#include "gr_test.h"
#include "test_util.h"

static gt_rng rng = {1910};

static gr_output vec(gr_graph *g, int n, const double *v) {
  return gr_const_data(g, GR_F64, (gr_shape){1, {n}}, v);
}

/* d sum(y) / dx */
static gr_output grad(gr_graph *g, gr_output y, gr_output x) {
  gr_output s = gr_reduce_sum(g, y, NULL, 0, false), d;
  GR_CHECK(gr_gradients(g, &s, 1, &x, 1, NULL, false, &d) == GR_OK);
  return d;
}

/* Runs o on 1 device and spread round robin over 3 (where something must
 * cross devices and the values must equal the 1-device ones bit for bit)
 * and compares its n values with want (within tol; NaN never matches). */
static void expect(gr_graph *g, gr_output o, const double *want, int n, double tol,
                   const char *what) {
  gr_tensor t[2];
  for (int d = 0; d < 2; d++) {
    int devices = d ? 3 : 1;
    int64_t sends = 0;
    if (!gt_run_on(g, devices, NULL, 0, &o, 1, &t[d], &sends)) {
      GR_CHECK_MSG(false, "%s: %d device(s)", what, devices);
      if (d) gr_tensor_release(&t[0]);
      return;
    }
    GR_CHECK_MSG(devices == 1 || sends > 0, "%s: nothing crossed devices", what);
    GR_CHECK_EQ_INT(gr_tensor_num_elements(&t[d]), n);
    for (int i = 0; i < n && i < gr_tensor_num_elements(&t[d]); i++) {
      double v = gr_tensor_get_f64(&t[d], i);
      GR_CHECK_MSG(fabs(v - want[i]) <= tol, "%s[%d], %d device(s): %.17g, want %.17g", what, i,
                   devices, v, want[i]);
    }
  }
  GR_CHECK_MSG(gt_bit_equal(&t[1], &t[0]), "%s: 3 devices", what);
  gr_tensor_release(&t[0]);
  gr_tensor_release(&t[1]);
}

/* ---- reduce_prod at zeros -------------------------------------------------------- */

/* The product of x over the indices not in the bit set `skip`. */
static double prod_skip(const double *x, int n, unsigned skip) {
  double p = 1;
  for (int k = 0; k < n; k++)
    if (!(skip >> k & 1)) p *= x[k];
  return p;
}

static void test_reduce_prod_at_zeros(void) {
  const double cases[][4] = {{2, 0, 3}, {0, 2, 0}, {0, 0, 0}, {2, -1.5, 3}};
  for (int c = 0; c < 4; c++) {
    gr_graph *g = gr_graph_new();
    gr_output x = vec(g, 3, cases[c]), d1 = grad(g, gr_reduce_prod(g, x, NULL, 0, false), x);
    double want[3];
    for (int j = 0; j < 3; j++) want[j] = prod_skip(cases[c], 3, 1u << j);
    expect(g, d1, want, 3, 0, "d prod / dx");
    /* the Hessian, column by column: prod over the others but j and k */
    for (int k = 0; k < 3; k++) {
      double e[3] = {0}, h[3];
      e[k] = 1;
      gr_output d2 = grad(g, gr_mul(g, d1, vec(g, 3, e)), x);
      for (int j = 0; j < 3; j++) h[j] = j == k ? 0 : prod_skip(cases[c], 3, 1u << j | 1u << k);
      expect(g, d2, h, 3, 0, "d2 prod / dx dx");
    }
    gr_graph_free(g);
  }
  /* third derivatives at two zeros */
  const double x4[4] = {2, 0, 3, 0};
  gr_graph *g = gr_graph_new();
  gr_output x = vec(g, 4, x4), d1 = grad(g, gr_reduce_prod(g, x, NULL, 0, false), x);
  for (int k = 0; k < 4; k++)
    for (int l = 0; l < 4; l++) {
      double ek[4] = {0}, el[4] = {0}, want[4];
      ek[k] = el[l] = 1;
      gr_output d2 = grad(g, gr_mul(g, d1, vec(g, 4, ek)), x);
      gr_output d3 = grad(g, gr_mul(g, d2, vec(g, 4, el)), x);
      for (int j = 0; j < 4; j++)
        want[j] = j == k || j == l || k == l ? 0 : prod_skip(x4, 4, 1u << j | 1u << k | 1u << l);
      expect(g, d3, want, 4, 0, "d3 prod");
    }
  gr_graph_free(g);
  /* along axes, with and without keepdims, f32 */
  const float m[6] = {2, 0, 3, 1, 4, 0.5f};
  const struct {
    int n;
    int64_t axes[2];
    double want[6];
  } ax[] = {{1, {1}, {0, 6, 0, 2, 0.5, 4}},
            {1, {-2}, {1, 4, 0.5, 2, 0, 3}},
            {0, {0}, {0, 12, 0, 0, 0, 0}},
            {2, {1, 0}, {0, 12, 0, 0, 0, 0}}};
  for (int a = 0; a < 4; a++)
    for (int keep = 0; keep < 2; keep++) {
      g = gr_graph_new();
      x = gr_const_data(g, GR_F32, (gr_shape){2, {2, 3}}, m);
      expect(g, grad(g, gr_reduce_prod(g, x, ax[a].axes, ax[a].n, keep), x), ax[a].want, 6, 0,
             "d prod / dx along axes");
      gr_graph_free(g);
    }
}

/* Up to the 7th derivative (6 directions); the 8th is an error naming the node. */
static void test_reduce_prod_order_limit(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = vec(g, 3, (double[]){1, 2, 3}), d = gr_reduce_prod(g, x, NULL, 0, false);
  for (int order = 1; order <= 7; order++) d = grad(g, d, x);
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_output s = gr_reduce_sum(g, d, NULL, 0, false), d8;
  GR_CHECK(gr_gradients(g, &s, 1, &x, 1, NULL, false, &d8) == GR_ERR_UNIMPLEMENTED);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "at most 7 times");
  gr_graph_free(g);
}

/* ---- prod_others against brute force --------------------------------------------- */

/* The e1...em coefficient of prod_{k != j} (x_k + sum_r e_r t_r[k]) over the
 * n members of one group: every way to give each direction its own element. */
static double others_ref(const double *x, const double *const *t, int m, int n, int j,
                         unsigned used, int r) {
  if (r == m) return prod_skip(x, n, used | 1u << j);
  double s = 0;
  for (int k = 0; k < n; k++)
    if (k != j && !(used >> k & 1)) s += t[r][k] * others_ref(x, t, m, n, j, used | 1u << k, r + 1);
  return s;
}

static void test_prod_others_kernel(void) {
  for (int c = 0; c < 60; c++) {
    int m = c % 3, rank = (int)gt_int(&rng, 1, 3);
    gr_dtype dt = c % 2 ? GR_F32 : GR_F64;
    gr_shape s = gt_random_shape(&rng, rank, 3);
    int64_t axes[GR_MAX_RANK];
    int na = 0;
    bool red[GR_MAX_RANK] = {false};
    for (int i = 0; i < rank; i++)
      if (gt_int(&rng, 0, 1)) {
        red[i] = true;
        axes[na++] = i - (gt_int(&rng, 0, 1) ? rank : 0);
      }
    if (na == 0)
      for (int i = 0; i < rank; i++) red[i] = true; /* empty list: every axis */
    gr_tensor in[3];
    for (int d = 0; d <= m; d++) {
      in[d] = gt_random(&rng, dt, s, -2, 2);
      for (int64_t e = 0; d == 0 && e < gr_tensor_num_elements(&in[0]); e++)
        if (gt_int(&rng, 0, 2) == 0) gr_tensor_set_f64(&in[0], e, 0); /* a third are zeros */
    }
    gr_tensor got, want = gt_zeros(dt, s);
    gr_error err;
    gr_attr a = gr_attr_ints("axes", na, axes);
    /* the reference, group by group: the members of a group share the kept coordinates */
    int64_t n = gr_shape_num_elements(&s), idx[GR_MAX_RANK], jdx[GR_MAX_RANK];
    for (int64_t e = 0; e < n; e++) {
      double xs[32], ts[2][32];
      const double *tp[2] = {ts[0], ts[1]};
      int cnt = 0, self = 0;
      gt_unravel(&s, e, idx);
      for (int64_t f = 0; f < n; f++) {
        gt_unravel(&s, f, jdx);
        bool same = true;
        for (int i = 0; i < rank; i++)
          if (!red[i] && idx[i] != jdx[i]) same = false;
        if (!same) continue;
        if (f == e) self = cnt;
        xs[cnt] = gr_tensor_get_f64(&in[0], f);
        for (int r = 0; r < m; r++) ts[r][cnt] = gr_tensor_get_f64(&in[1 + r], f);
        cnt++;
      }
      gr_tensor_set_f64(&want, e, others_ref(xs, tp, m, cnt, self, 0, 0));
    }
    if (gt_run_op("prod_others", in, 1 + m, &a, 1, &got, 1, &err) != GR_OK) {
      GR_CHECK_MSG(false, "case %d: %s", c, err.msg);
    } else {
      GR_CHECK_MSG(gt_near(&got, &want, dt == GR_F32 ? 1e-5 : 1e-12, 1e-6), "case %d (m=%d)", c, m);
      gr_tensor_release(&got);
    }
    gr_tensor_release(&want);
    for (int d = 0; d <= m; d++) gr_tensor_release(&in[d]);
  }
  /* a direction of another shape is refused */
  gr_tensor x = gt_zeros(GR_F64, (gr_shape){1, {3}}), t = gt_zeros(GR_F64, (gr_shape){1, {2}});
  gr_tensor got, both[2] = {x, t};
  gr_error err;
  GR_CHECK(gt_run_op("prod_others", both, 2, NULL, 0, &got, 1, &err) == GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(err.msg, "direction 1");
  gr_tensor_release(&x);
  gr_tensor_release(&t);
}

/* ---- pow at zero and at negative bases -------------------------------------------- */

static void test_pow_at_zero(void) {
  const double a[5] = {0, 0, 0, -2, 2}, b[5] = {0, 1, 2, 3, 0.5};
  /* d/da = b a^(b-1), 0 where b = 0; d/db = a^b log a, 0 where a <= 0 */
  const double da[5] = {0, 1, 0, 12, 0.5 / sqrt(2)};
  const double db[5] = {0, 0, 0, 0, sqrt(2) * log(2)};
  const double daa[5] = {0, 0, 2, -12, -0.25 * pow(2, -1.5)};
  gr_graph *g = gr_graph_new();
  gr_output x = vec(g, 5, a), y = vec(g, 5, b), p = gr_pow(g, x, y);
  gr_output dx = grad(g, p, x);
  expect(g, dx, da, 5, 1e-15, "d(a**b)/da");
  expect(g, grad(g, p, y), db, 5, 1e-15, "d(a**b)/db");
  expect(g, grad(g, dx, x), daa, 5, 1e-15, "d2(a**b)/da2");
  gr_graph_free(g);
  /* f32 and a scalar exponent: x ** 0 */
  g = gr_graph_new();
  const float z[3] = {0, 1, -3};
  x = gr_const_data(g, GR_F32, (gr_shape){1, {3}}, z);
  p = gr_pow(g, x, gr_const_f32(g, 0));
  expect(g, grad(g, p, x), (double[]){0, 0, 0}, 3, 0, "d(x**0)/dx");
  expect(g, grad(g, grad(g, p, x), x), (double[]){0, 0, 0}, 3, 0, "d2(x**0)/dx2");
  gr_graph_free(g);
}

/* ---- the same points by finite differences ----------------------------------------- */

/* reduce_prod and pow are smooth at these zeros (pow at integer exponents),
 * so central differences agree with the conventions there: orders 1 to 3
 * (gt_check_gradient: the gradient of sum(y * R), then of sum(dx * R')),
 * on 1 device and spread round robin over 3. */
typedef struct fd_arg {
  int n;
  const double *c; /* pow: the other operand */
  int64_t axis;    /* reduce_prod: -1 every axis */
} fd_arg;

static gr_output b_prod(gr_graph *g, const gr_output *x, void *arg) {
  const fd_arg *a = arg;
  return gr_reduce_prod(g, x[0], a->axis < 0 ? NULL : &a->axis, a->axis < 0 ? 0 : 1, false);
}
static gr_output b_pow_base(gr_graph *g, const gr_output *x, void *arg) {
  const fd_arg *a = arg;
  return gr_pow(g, x[0], vec(g, a->n, a->c));
}
static gr_output b_pow_exponent(gr_graph *g, const gr_output *x, void *arg) {
  const fd_arg *a = arg;
  return gr_pow(g, vec(g, a->n, a->c), x[0]);
}

static void fd_case(const char *what, gt_build_fn build, const fd_arg *a, gr_shape shape,
                    const double *x) {
  gr_tensor in = gt_make(GR_F64, shape, x);
  for (int devices = 1; devices <= 3; devices += 2)
    for (int order = 1; order <= 3; order++)
      GR_CHECK_MSG(gt_check_gradient_on(what, build, (void *)a, &in, 1, order, 0, 1e-6, devices),
                   "%s: order %d, %d device(s)", what, order, devices);
  gr_tensor_release(&in);
}

static void test_zeros_by_differences(void) {
  const double v[][3] = {{2, 0, 3}, {0, 2, 0}, {0, 0, 0}};
  for (int c = 0; c < 3; c++)
    fd_case("reduce_prod", b_prod, &(fd_arg){.axis = -1}, (gr_shape){1, {3}}, v[c]);
  const double m[6] = {2, 0, 3, 1, 4, 0.5};
  for (int64_t ax = -1; ax <= 1; ax++)
    fd_case("reduce_prod of a matrix", b_prod, &(fd_arg){.axis = ax}, (gr_shape){2, {2, 3}}, m);
  /* d/da a^b at a = 0 for b = 0..3, at a negative base, and a^0.5 away from 0 */
  const double a[6] = {0, 0, 0, 0, -2, 2}, b[6] = {0, 1, 2, 3, 3, 0.5};
  fd_case("pow, d/d base", b_pow_base, &(fd_arg){.n = 6, .c = b}, (gr_shape){1, {6}}, a);
  /* d/db a^b at a = 0 (0 by convention: 0^(b +- eps) is 0) */
  const double a0[3] = {0, 0, 2}, b0[3] = {1, 2, 0.5};
  fd_case("pow, d/d exponent", b_pow_exponent, &(fd_arg){.n = 3, .c = a0}, (gr_shape){1, {3}}, b0);
}

/* ---- ties and kinks ---------------------------------------------------------------- */

static void test_maximum_minimum_ties(void) {
  const double v[3] = {1, 2, 3}, w[3] = {1, 5, 1};
  gr_graph *g = gr_graph_new();
  gr_output a = vec(g, 3, v), b = vec(g, 3, v); /* equal values, two nodes */
  for (int mx = 0; mx < 2; mx++) {
    gr_output y = mx ? gr_maximum(g, a, b) : gr_minimum(g, a, b);
    expect(g, grad(g, y, a), (double[]){1, 1, 1}, 3, 0, "ties: d/da");
    expect(g, grad(g, y, b), (double[]){0, 0, 0}, 3, 0, "ties: d/db");
  }
  /* broadcasting against a scalar: ties at w = 1 go to a */
  gr_output c = vec(g, 3, w), s = gr_const_f64(g, 1);
  expect(g, grad(g, gr_maximum(g, c, s), c), (double[]){1, 1, 1}, 3, 0, "max(c, 1): d/dc");
  expect(g, grad(g, gr_maximum(g, c, s), s), (double[]){0}, 1, 0, "max(c, 1): d/ds");
  expect(g, grad(g, gr_minimum(g, c, s), c), (double[]){1, 0, 1}, 3, 0, "min(c, 1): d/dc");
  expect(g, grad(g, gr_minimum(g, c, s), s), (double[]){1}, 1, 0, "min(c, 1): d/ds");
  gr_graph_free(g);
}

static void test_reduce_extreme_ties(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = vec(g, 3, (double[]){1, 3, 3});
  expect(g, grad(g, gr_reduce_max(g, a, NULL, 0, false), a), (double[]){0, 0.5, 0.5}, 3, 0,
         "reduce_max ties");
  gr_output b = vec(g, 4, (double[]){3, 1, 3, 3});
  expect(g, grad(g, gr_reduce_max(g, b, NULL, 0, true), b), (double[]){1. / 3, 0, 1. / 3, 1. / 3},
         4, 1e-15, "reduce_max three ties");
  const double m[6] = {2, 2, 5, 4, 1, 1};
  gr_output c = gr_const_data(g, GR_F64, (gr_shape){2, {2, 3}}, m);
  expect(g, grad(g, gr_reduce_min(g, c, (int64_t[]){1}, 1, true), c),
         (double[]){0.5, 0.5, 0, 0, 0.5, 0.5}, 6, 0, "reduce_min ties per row");
  gr_graph_free(g);
}

static void test_kinks(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = vec(g, 3, (double[]){-1, 0, 2});
  expect(g, grad(g, gr_relu(g, x), x), (double[]){0, 0, 1}, 3, 0, "relu at 0");
  expect(g, grad(g, gr_abs(g, x), x), (double[]){-1, 0, 1}, 3, 0, "abs at 0");
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_reduce_prod_at_zeros);
  GR_RUN(test_prod_others_kernel);
  GR_RUN(test_reduce_prod_order_limit);
  GR_RUN(test_pow_at_zero);
  GR_RUN(test_zeros_by_differences);
  GR_RUN(test_maximum_minimum_ties);
  GR_RUN(test_reduce_extreme_ties);
  GR_RUN(test_kinks);
  return gr_test_finish();
}
