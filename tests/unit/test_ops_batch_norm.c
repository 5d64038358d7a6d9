/* Tests of ops/batch_norm.c and ops/dropout.c: batch_norm in training
 * (batch statistics, moving averages updated in the step) and inference
 * (moving statistics, nothing updated) against a double reference,
 * gradients by finite differences, bad input; dropout's keep rate,
 * scaling, determinism per (seed, step), identity at inference and its
 * gradient. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

static gt_rng rng = {41};

typedef struct bn_graph {
  gr_graph *g;
  gr_output x, y, mm, mv;
} bn_graph;

/* batch_norm of a placeholder x with gamma, beta constants and moving
 * statistics in variables initialised to mm0, mv0. */
static bn_graph bn_build(const gr_tensor *x, const gr_tensor *gamma, const gr_tensor *beta,
                         const gr_tensor *mm0, const gr_tensor *mv0, bool training) {
  bn_graph b;
  b.g = gr_graph_new();
  b.x = gr_placeholder(b.g, "x", x->dtype, x->shape);
  b.mm = gr_variable(b.g, "mm", gr_const(b.g, mm0));
  b.mv = gr_variable(b.g, "mv", gr_const(b.g, mv0));
  b.y = gr_batch_norm(b.g, b.x, gr_const(b.g, gamma), gr_const(b.g, beta), b.mm, b.mv, training,
                      0.9, 1e-3);
  return b;
}

static void ref_stats(const gr_tensor *x, int64_t c, double *mean, double *var) {
  int64_t rows = gr_tensor_num_elements(x) / c;
  for (int64_t j = 0; j < c; j++) {
    double s = 0, q = 0;
    for (int64_t r = 0; r < rows; r++) s += gr_tensor_get_f64(x, r * c + j);
    mean[j] = s / (double)rows;
    for (int64_t r = 0; r < rows; r++) {
      double d = gr_tensor_get_f64(x, r * c + j) - mean[j];
      q += d * d;
    }
    var[j] = q / (double)rows;
  }
}

static void check_bn(gr_dtype dt, gr_shape xs, bool training) {
  int64_t c = xs.dims[xs.rank - 1], n = gr_shape_num_elements(&xs), rows = n / c;
  gr_shape cs = gr_shape_make(1, (int64_t[]){c});
  gr_tensor x = gt_random(&rng, dt, xs, -3, 5), gm = gt_random(&rng, dt, cs, 0.5, 2);
  gr_tensor bt = gt_random(&rng, dt, cs, -1, 1), mm0 = gt_random(&rng, dt, cs, -1, 1);
  gr_tensor mv0 = gt_random(&rng, dt, cs, 0.5, 2);
  bn_graph b = bn_build(&x, &gm, &bt, &mm0, &mv0, training);
  gr_error err;
  gr_session *s = gr_session_new(b.g, NULL, &err);
  GR_CHECK(s != NULL);
  if (!s) return;
  gr_tensor out[3];
  gr_output f[3] = {b.y, gr_output_at(b.y, 1), gr_output_at(b.y, 2)};
  for (int step = 0; step < 2; step++) {
    GR_CHECK_OK(gr_session_run(s, &(gr_feed){b.x, &x}, 1, f, 3, out, NULL, 0, &err), err);
    double *mean = calloc((size_t)c, sizeof(double)), *var = calloc((size_t)c, sizeof(double));
    ref_stats(&x, c, mean, var);
    double tol = dt == GR_F32 ? 1e-4 : 1e-10;
    for (int64_t j = 0; j < c; j++) {
      double mu = training ? mean[j] : gr_tensor_get_f64(&mm0, j);
      double v = training ? var[j] : gr_tensor_get_f64(&mv0, j);
      double rs = 1 / sqrt(v + 1e-3);
      GR_CHECK_NEAR(gr_tensor_get_f64(&out[1], j), mu, tol);
      GR_CHECK_NEAR(gr_tensor_get_f64(&out[2], j), rs, tol * rs);
      for (int64_t r = 0; r < rows; r += 1 + rows / 7) {
        double want = (gr_tensor_get_f64(&x, r * c + j) - mu) * rs * gr_tensor_get_f64(&gm, j) +
                      gr_tensor_get_f64(&bt, j);
        GR_CHECK_NEAR(gr_tensor_get_f64(&out[0], r * c + j), want, tol * (1 + fabs(want)));
      }
    }
    /* the moving statistics after step + 1 updates (or none at inference) */
    gr_tensor mv[2];
    GR_CHECK_OK(gr_session_run(s, NULL, 0, (gr_output[]){b.mm, b.mv}, 2, mv, NULL, 0, &err), err);
    for (int64_t j = 0; j < c; j++) {
      double em = gr_tensor_get_f64(&mm0, j), ev = gr_tensor_get_f64(&mv0, j);
      for (int k = 0; training && k <= step; k++) {
        em = 0.9 * em + 0.1 * mean[j];
        ev = 0.9 * ev + 0.1 * var[j] * (double)rows / (double)(rows - 1);
      }
      GR_CHECK_NEAR(gr_tensor_get_f64(&mv[0], j), em, tol);
      GR_CHECK_NEAR(gr_tensor_get_f64(&mv[1], j), ev, tol * (1 + ev));
    }
    for (int i = 0; i < 3; i++) gr_tensor_release(&out[i]);
    gr_tensor_release(&mv[0]), gr_tensor_release(&mv[1]);
    free(mean), free(var);
  }
  gr_session_free(s);
  gr_graph_free(b.g);
  gr_tensor_release(&x), gr_tensor_release(&gm), gr_tensor_release(&bt);
  gr_tensor_release(&mm0), gr_tensor_release(&mv0);
}

static void test_batch_norm_training_and_inference(void) {
  for (int t = 0; t < 2; t++) {
    check_bn(GR_F32, gr_shape_make(4, (int64_t[]){4, 5, 3, 6}), t);
    check_bn(GR_F64, gr_shape_make(4, (int64_t[]){1, 7, 5, 3}), t);
    check_bn(GR_F32, gr_shape_make(2, (int64_t[]){9, 64}), t);
    check_bn(GR_F64, gr_shape_make(2, (int64_t[]){5, 1}), t);
  }
}

/* x, gamma, beta differentiated; moving statistics in variables. */
static gr_output build_bn(gr_graph *g, const gr_output *x, void *arg) {
  bool training = *(bool *)arg;
  gr_shape cs = x[1].node->out_shapes[0];
  gr_output mm = gr_variable(g, "mm", gr_random_uniform(g, GR_F64, cs, -1, 1, 3));
  gr_output mv = gr_variable(g, "mv", gr_random_uniform(g, GR_F64, cs, 0.5, 2, 4));
  return gr_batch_norm(g, x[0], x[1], x[2], mm, mv, training, 0.9, 1e-3);
}

static void test_batch_norm_gradients(void) {
  for (int t = 0; t < 2; t++) {
    bool training = t;
    gr_shape xs[2] = {gr_shape_make(4, (int64_t[]){3, 4, 3, 5}),
                      gr_shape_make(2, (int64_t[]){6, 4})};
    for (int k = 0; k < 2; k++) {
      int64_t c = xs[k].dims[xs[k].rank - 1];
      gr_shape cs = gr_shape_make(1, (int64_t[]){c});
      gr_tensor in[3] = {gt_random(&rng, GR_F64, xs[k], -2, 2), gt_random(&rng, GR_F64, cs, 0.5, 2),
                         gt_random(&rng, GR_F64, cs, -1, 1)};
      for (int order = 1; order <= 2; order++)
        GR_CHECK_MSG(gt_check_gradient("batch_norm", build_bn, &training, in, 3, order, 40, 1e-6),
                     "training %d shape %d order %d", t, k, order);
      for (int i = 0; i < 3; i++) gr_tensor_release(&in[i]);
    }
  }
}

static void test_batch_norm_errors(void) {
  gr_shape x4 = gr_shape_make(4, (int64_t[]){2, 4, 4, 3}), c3 = gr_shape_make(1, (int64_t[]){3});
  struct {
    gr_shape x, gamma;
    bool var, training;
    double eps, mom;
    const char *sub;
  } bad[] = {
      {x4, c3, false, true, 1e-3, 0.9,
       "in training, input 'moving_mean' must be a variable (it is updated in place)"},
      {x4, gr_shape_make(1, (int64_t[]){4}), true, true, 1e-3, 0.9,
       "channel mismatch: input 'gamma' [4] but x [2, 4, 4, 3] has 3 channels"},
      {gr_shape_make(1, (int64_t[]){3}), c3, true, true, 1e-3, 0.9,
       "input 'x' must have rank >= 2 (channels last), got shape [3]"},
      {x4, gr_shape_make(2, (int64_t[]){1, 3}), true, false, 1e-3, 0.9,
       "input 'gamma' must have rank 1, got shape [1, 3]"},
      {x4, c3, true, true, 0, 0.9, "need epsilon > 0 and 0 <= momentum <= 1"},
      {x4, c3, true, true, 1e-3, 1.5, "momentum 1.5"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gr_graph *g = gr_graph_new();
    gr_output x = gr_placeholder(g, "x", GR_F32, bad[i].x);
    gr_output gm = gr_placeholder(g, "gamma", GR_F32, bad[i].gamma);
    gr_output bt = gr_placeholder(g, "beta", GR_F32, c3);
    gr_output mm = bad[i].var ? gr_variable(g, "mm", gr_zeros(g, GR_F32, c3))
                              : gr_placeholder(g, "mm", GR_F32, c3);
    gr_output mv = gr_variable(g, "mv", gr_ones(g, GR_F32, c3));
    gr_output in[5] = {x, gm, bt, mm, mv};
    gr_attr at[3] = {gr_attr_bool("training", bad[i].training),
                     gr_attr_float("epsilon", bad[i].eps), gr_attr_float("momentum", bad[i].mom)};
    gr_output y = gr_op(g, "batch_norm", "bn", in, 5, at, 3);
    const gr_error *e = gr_graph_error(g);
    GR_CHECK_MSG(!y.node && e, "case %zu", i);
    if (e) {
      GR_CHECK_STR_CONTAINS(e->msg, "node 'bn'");
      GR_CHECK_STR_CONTAINS(e->msg, bad[i].sub);
    }
    gr_graph_free(g);
  }
}

/* ---- dropout ----------------------------------------------------------------------------- */

/* Same shape and bytes (quiet, unlike gt_equal, for expected differences). */
static bool same(const gr_tensor *a, const gr_tensor *b) {
  return gr_shape_equal(&a->shape, &b->shape) &&
         memcmp(gr_tensor_data(a), gr_tensor_data(b),
                (size_t)gr_tensor_num_elements(a) * gr_dtype_size(a->dtype)) == 0;
}

/* Runs dropout(ones [n]) once per step for `steps` steps in a graph of
 * seed gseed; the results into out. */
static void run_dropout(uint64_t gseed, int64_t op_seed, double rate, bool training, int steps,
                        int threads, gr_tensor *out) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, gseed);
  gr_output x = gr_ones(g, GR_F32, gr_shape_make(1, (int64_t[]){20000}));
  gr_output y = gr_dropout(g, x, rate, op_seed, training);
  /* a second dropout node beside it: names key the streams */
  gr_output y2 = gr_dropout(g, x, rate, op_seed, training);
  gr_error err;
  gr_session *s = gr_session_new(g, &(gr_session_options){.inter_op_threads = threads}, &err);
  for (int i = 0; i < steps; i++) {
    gr_tensor r[2];
    GR_CHECK_OK(gr_session_run(s, NULL, 0, (gr_output[]){y, y2}, 2, r, NULL, 0, &err), err);
    out[i] = r[0];
    if (i == 0) GR_CHECK(!training || !same(&r[0], &r[1]));
    gr_tensor_release(&r[1]);
  }
  gr_session_free(s);
  gr_graph_free(g);
}

static void test_dropout_rate_and_determinism(void) {
  static const double rates[] = {0.1, 0.3, 0.5, 0.8};
  for (int k = 0; k < 4; k++) {
    gr_tensor a[2], b[2], c[2];
    run_dropout(7, 1, rates[k], true, 2, 1, a);
    run_dropout(7, 1, rates[k], true, 2, 4, b);
    run_dropout(7, 2, rates[k], true, 1, 1, c);
    int64_t n = gr_tensor_num_elements(&a[0]), zeros = 0;
    const float *p = gr_tensor_data(&a[0]);
    for (int64_t i = 0; i < n; i++) {
      if (p[i] == 0)
        zeros++;
      else
        GR_CHECK_NEAR(p[i], 1 / (1 - rates[k]), 1e-6);
    }
    /* binomial: 4 standard deviations */
    double sd = sqrt(rates[k] * (1 - rates[k]) / (double)n);
    GR_CHECK_NEAR((double)zeros / (double)n, rates[k], 4 * sd);
    GR_CHECK(same(&a[0], &b[0]) && same(&a[1], &b[1])); /* any thread count */
    GR_CHECK(!same(&a[0], &a[1]));                      /* a new mask each step */
    GR_CHECK(!same(&a[0], &c[0]));                      /* another seed */
    for (int i = 0; i < 2; i++) gr_tensor_release(&a[i]), gr_tensor_release(&b[i]);
    gr_tensor_release(&c[0]);
  }
  gr_tensor inf;
  run_dropout(7, 1, 0.5, false, 1, 1, &inf);
  const float *p = gr_tensor_data(&inf);
  for (int64_t i = 0; i < gr_tensor_num_elements(&inf); i++) GR_CHECK(p[i] == 1.0f);
  gr_tensor_release(&inf);
}

/* d sum(dropout(x) * w) / dx = w * mask, fetched in the same step. */
static void test_dropout_gradient_and_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_shape s = gr_shape_make(2, (int64_t[]){30, 7});
  gr_tensor xv = gt_random(&rng, GR_F64, s, -1, 1), wv = gt_random(&rng, GR_F64, s, -1, 1);
  gr_output x = gr_placeholder(g, "x", GR_F64, s);
  gr_output y = gr_dropout(g, x, 0.4, 3, true), dx;
  gr_output loss = gr_reduce_sum(g, gr_mul(g, y, gr_const(g, &wv)), NULL, 0, false);
  GR_CHECK(gr_gradients(g, &loss, 1, &x, 1, NULL, false, &dx) == GR_OK);
  gr_error err;
  gr_session *sess = gr_session_new(g, NULL, &err);
  gr_tensor r[3];
  GR_CHECK_OK(gr_session_run(sess, &(gr_feed){x, &xv}, 1, (gr_output[]){dx, gr_output_at(y, 1), y},
                             3, r, NULL, 0, &err),
              err);
  for (int64_t i = 0; i < 210; i++) {
    double m = gr_tensor_get_f64(&r[1], i);
    GR_CHECK(m == 0 || fabs(m - 1 / 0.6) < 1e-12);
    GR_CHECK_NEAR(gr_tensor_get_f64(&r[0], i), gr_tensor_get_f64(&wv, i) * m, 1e-12);
    GR_CHECK_NEAR(gr_tensor_get_f64(&r[2], i), gr_tensor_get_f64(&xv, i) * m, 1e-12);
  }
  for (int i = 0; i < 3; i++) gr_tensor_release(&r[i]);
  gr_session_free(sess);
  /* bad rates */
  static const double bad[] = {1.0, -0.1, 2};
  for (int i = 0; i < 3; i++) {
    gr_output d = gr_op(g, "dropout", "drop", &x, 1, (gr_attr[]){gr_attr_float("rate", bad[i])}, 1);
    GR_CHECK(!d.node && gr_graph_error(g));
    if (gr_graph_error(g)) {
      GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "node 'drop");
      GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "attr 'rate' must be in [0, 1)");
    }
    gr_graph_clear_error(g);
  }
  gr_graph_free(g);
  gr_tensor_release(&xv), gr_tensor_release(&wv);
}

int main(void) {
  GR_RUN(test_batch_norm_training_and_inference);
  GR_RUN(test_batch_norm_gradients);
  GR_RUN(test_batch_norm_errors);
  GR_RUN(test_dropout_rate_and_determinism);
  GR_RUN(test_dropout_gradient_and_errors);
  return gr_test_finish();
}
