/* Tests of ops/layers.c (gr_ops_layers.h): each layer's output against a
 * plain double-precision reference computed here from the layer's own
 * variables on random inputs; the gradients of a loss with respect to its
 * variables and input against central differences (the variables fed with
 * perturbed values); Keras' variable names, shapes and initial values; the
 * reuse rules (a second call with the same name applies the same
 * variables, a mismatch is an error naming both); variables made outside
 * the name scope and control dependencies in force; the roles that
 * graphrun check --layers counts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

static gt_rng rng = {2024};

/* ---- helpers ------------------------------------------------------------------------------ */

static gr_output var(gr_graph *g, const char *name) {
  gr_node *n = gr_graph_find_node(g, name);
  GR_CHECK_MSG(n && gr_ops_is_variable(n), "no variable '%s'", name);
  return (gr_output){n, 0};
}

/* Whether building o failed with code and a message containing text;
 * clears the graph's error. */
static bool fails(gr_output o, gr_graph *g, gr_status code, const char *text) {
  const gr_error *e = gr_graph_error(g);
  bool ok = !o.node && e && e->code == code && strstr(e->msg, text);
  if (!ok)
    fprintf(stderr, "  got %s: %s (want %s with '%s')\n", e ? gr_status_name(e->code) : "no error",
            e ? e->msg : "", gr_status_name(code), text);
  gr_graph_clear_error(g);
  return ok;
}

static int count_variables(const gr_graph *g) {
  int k = 0;
  for (int i = 0; i < gr_graph_num_nodes(g); i++) k += gr_ops_is_variable(gr_graph_node(g, i));
  return k;
}

static double at(const gr_tensor *t, int64_t i) {
  return gr_tensor_get_f64(t, i);
}

/* Runs fetches with feeds on s; false (printed) on failure. */
static bool run(gr_session *s, const gr_feed *f, int nf, const gr_output *o, int n,
                gr_tensor *out) {
  gr_error err;
  gr_status st = gr_session_run(s, f, nf, o, n, out, NULL, 0, &err);
  GR_CHECK_OK(st, err);
  return st == GR_OK;
}

/* d loss / d wrt[i] (variables or the placeholder x, fed by feeds) from
 * gr_gradients against central differences at up to 10 elements of each:
 * the perturbed value is fed in place of the variable (or the input). */
static void check_gradients(const char *what, gr_graph *g, gr_output loss, const gr_output *wrt,
                            int n, gr_feed *feeds, int nf, double tol) {
  gr_output d[8];
  GR_CHECK(gr_gradients(g, &loss, 1, wrt, n, NULL, false, d) == GR_OK);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK_OK(s ? GR_OK : err.code, err);
  if (!s) return;
  gr_tensor base[8], grad[8];
  if (!run(s, feeds, nf, wrt, n, base) || !run(s, feeds, nf, d, n, grad)) {
    gr_session_free(s);
    return;
  }
  for (int i = 0; i < n; i++) {
    int64_t total = gr_tensor_num_elements(&base[i]), step = total > 10 ? total / 10 : 1;
    gr_feed f[8];
    int k = 0, self = -1;
    for (int j = 0; j < nf; j++) {
      f[k] = feeds[j];
      if (feeds[j].output.node == wrt[i].node) self = k;
      k++;
    }
    if (self < 0) self = k++;
    for (int64_t e = 0; e < total; e += step) {
      double lv[2], h = 1e-6;
      for (int sgn = 0; sgn < 2; sgn++) {
        gr_tensor p = gt_zeros(GR_F64, base[i].shape);
        memcpy(gr_tensor_data(&p), gr_tensor_data(&base[i]), (size_t)total * sizeof(double));
        gr_tensor_set_f64(&p, e, at(&base[i], e) + (sgn ? -h : h));
        f[self] = (gr_feed){wrt[i], &p};
        gr_tensor l;
        if (run(s, f, k, &loss, 1, &l)) lv[sgn] = at(&l, 0), gr_tensor_release(&l);
        gr_tensor_release(&p);
      }
      double num = (lv[0] - lv[1]) / (2 * h), ana = at(&grad[i], e);
      GR_CHECK_MSG(fabs(num - ana) <= tol * (1 + fabs(num)),
                   "%s: d loss / d %s[%lld]: analytic %.10g, numeric %.10g", what,
                   wrt[i].node->name, (long long)e, ana, num);
    }
  }
  for (int i = 0; i < n; i++) gr_tensor_release(&base[i]), gr_tensor_release(&grad[i]);
  gr_session_free(s);
}

/* loss = sum(y * R) for a fixed random R of y's (known) shape. */
static gr_output weighted_sum(gr_graph *g, gr_output y) {
  gr_tensor r = gt_random(&rng, GR_F64, y.node->out_shapes[y.index], -1, 1);
  gr_output c = gr_const(g, &r);
  gr_tensor_release(&r);
  return gr_reduce_sum(g, gr_mul(g, y, c), NULL, 0, false);
}

static double act(gr_activation a, double v) {
  return a == GR_ACT_RELU      ? (v > 0 ? v : 0)
         : a == GR_ACT_TANH    ? tanh(v)
         : a == GR_ACT_SIGMOID ? 1 / (1 + exp(-v))
                               : v;
}

/* ---- dense ------------------------------------------------------------------------------- */

static void test_dense(void) {
  enum { B = 5, IN = 7, U = 4 };
  for (int a = 0; a < 3; a++) {
    gr_activation acts[] = {GR_ACT_LINEAR, GR_ACT_RELU, GR_ACT_TANH};
    gr_graph *g = gr_graph_new();
    gr_output x = gr_placeholder(g, "x", GR_F64, gr_shape_make(2, (int64_t[]){B, IN}));
    gr_layer_options o = gr_layer_options_default();
    o.name = "model/d1", o.activation = acts[a];
    gr_graph_push_name_scope(g, "somewhere"); /* names the nodes, not the variables */
    gr_output y = gr_dense_layer(g, x, U, &o);
    gr_graph_pop_name_scope(g);
    GR_CHECK(gr_graph_error(g) == NULL);
    GR_CHECK(gt_inferred(y, GR_F64, gr_shape_make(2, (int64_t[]){B, U})));
    gr_output k = var(g, "model/d1/kernel"), b = var(g, "model/d1/bias");
    GR_CHECK(gt_inferred(k, GR_F64, gr_shape_make(2, (int64_t[]){IN, U})));
    GR_CHECK(gt_inferred(b, GR_F64, gr_shape_make(1, (int64_t[]){U})));
    GR_CHECK_EQ_INT(count_variables(g), 2);
    /* a bias to see it added: random, fed */
    gr_tensor xv = gt_random(&rng, GR_F64, gr_shape_make(2, (int64_t[]){B, IN}), -2, 2);
    gr_tensor bv = gt_random(&rng, GR_F64, gr_shape_make(1, (int64_t[]){U}), -1, 1);
    gr_error err;
    gr_session *s = gr_session_new(g, NULL, &err);
    gr_tensor init[2], out[2];
    GR_CHECK(run(s, &(gr_feed){x, &xv}, 1, (gr_output[]){k, b}, 2, init));
    /* Keras' initialisers: glorot_uniform in +-sqrt(6 / (in + out)), zeros */
    double lim = sqrt(6.0 / (IN + U)), lo = 1, hi = -1;
    for (int64_t i = 0; i < IN * U; i++) {
      lo = fmin(lo, at(&init[0], i)), hi = fmax(hi, at(&init[0], i));
      GR_CHECK(fabs(at(&init[0], i)) <= lim);
    }
    GR_CHECK(hi - lo > lim / 2); /* spread over the range, not constant */
    for (int64_t i = 0; i < U; i++) GR_CHECK(at(&init[1], i) == 0);
    GR_CHECK(run(s, (gr_feed[]){{x, &xv}, {b, &bv}}, 2, (gr_output[]){y, k}, 2, out));
    for (int64_t r = 0; r < B; r++)
      for (int64_t u = 0; u < U; u++) {
        double v = at(&bv, u);
        for (int64_t i = 0; i < IN; i++) v += at(&xv, r * IN + i) * at(&out[1], i * U + u);
        GR_CHECK_NEAR(at(&out[0], r * U + u), act(acts[a], v), 1e-12);
      }
    gr_session_free(s);
    gr_output loss = weighted_sum(g, y);
    check_gradients("dense", g, loss, (gr_output[]){k, b, x}, 3, (gr_feed[]){{x, &xv}}, 1, 1e-5);
    for (int i = 0; i < 2; i++) gr_tensor_release(&init[i]), gr_tensor_release(&out[i]);
    gr_tensor_release(&xv), gr_tensor_release(&bv);
    gr_graph_free(g);
  }
}

/* ---- conv2d, separable_conv2d -----------------------------------------------------------------
 */

enum { N = 2, H = 7, W = 6, C = 3 };

/* x [N, H, W, C] at (n, i, j, c), 0 outside. */
static double px(const gr_tensor *x, int64_t n, int64_t i, int64_t j, int64_t c, int64_t ch) {
  return i < 0 || i >= H || j < 0 || j >= W ? 0 : at(x, ((n * H + i) * W + j) * ch + c);
}

static void test_conv2d(void) {
  struct {
    int64_t kh, kw, s0, s1;
    const char *padding;
    gr_activation a;
  } cases[] = {{3, 3, 1, 1, "same", GR_ACT_RELU},
               {3, 2, 2, 1, "valid", GR_ACT_LINEAR},
               {2, 3, 2, 2, "SAME", GR_ACT_TANH}};
  enum { F = 4 };
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    gr_graph *g = gr_graph_new();
    gr_output x = gr_placeholder(g, "x", GR_F64, gr_shape_make(4, (int64_t[]){N, H, W, C}));
    gr_layer_options o = gr_layer_options_default();
    o.name = "block1/conv2d", o.padding = cases[t].padding, o.activation = cases[t].a;
    o.strides[0] = cases[t].s0, o.strides[1] = cases[t].s1;
    gr_output y = gr_conv2d_layer(g, x, F, cases[t].kh, cases[t].kw, &o);
    GR_CHECK(gr_graph_error(g) == NULL);
    gr_output k = var(g, "block1/conv2d/kernel"), b = var(g, "block1/conv2d/bias");
    GR_CHECK(gt_inferred(k, GR_F64, gr_shape_make(4, (int64_t[]){cases[t].kh, cases[t].kw, C, F})));
    int64_t oh, ow, pt, pl;
    bool same = strcasecmp(cases[t].padding, "same") == 0;
    gt_window_dim(H, cases[t].kh, cases[t].s0, 1, same ? "SAME" : "VALID", 0, 0, &oh, &pt);
    gt_window_dim(W, cases[t].kw, cases[t].s1, 1, same ? "SAME" : "VALID", 0, 0, &ow, &pl);
    GR_CHECK(gt_inferred(y, GR_F64, gr_shape_make(4, (int64_t[]){N, oh, ow, F})));
    gr_tensor xv = gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){N, H, W, C}), -1, 1);
    gr_tensor bv = gt_random(&rng, GR_F64, gr_shape_make(1, (int64_t[]){F}), -1, 1);
    gr_error err;
    gr_session *s = gr_session_new(g, NULL, &err);
    gr_tensor out[2];
    GR_CHECK(run(s, (gr_feed[]){{x, &xv}, {b, &bv}}, 2, (gr_output[]){y, k}, 2, out));
    double lim = sqrt(6.0 / (double)(cases[t].kh * cases[t].kw * (C + F)));
    for (int64_t i = 0; i < gr_tensor_num_elements(&out[1]); i++)
      GR_CHECK(fabs(at(&out[1], i)) <= lim);
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++)
          for (int64_t f = 0; f < F; f++) {
            double v = at(&bv, f);
            for (int64_t a = 0; a < cases[t].kh; a++)
              for (int64_t bb = 0; bb < cases[t].kw; bb++)
                for (int64_t c = 0; c < C; c++)
                  v += px(&xv, n, i * cases[t].s0 - pt + a, j * cases[t].s1 - pl + bb, c, C) *
                       at(&out[1], ((a * cases[t].kw + bb) * C + c) * F + f);
            GR_CHECK_NEAR(at(&out[0], ((n * oh + i) * ow + j) * F + f), act(cases[t].a, v), 1e-12);
          }
    gr_session_free(s);
    check_gradients("conv2d", g, weighted_sum(g, y), (gr_output[]){k, b, x}, 3,
                    (gr_feed[]){{x, &xv}}, 1, 1e-5);
    gr_tensor_release(&out[0]), gr_tensor_release(&out[1]);
    gr_tensor_release(&xv), gr_tensor_release(&bv);
    gr_graph_free(g);
  }
}

static void test_separable_conv2d(void) {
  enum { F = 5, DM = 2, KH = 3, KW = 2 };
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F64, gr_shape_make(4, (int64_t[]){N, H, W, C}));
  gr_layer_options o = gr_layer_options_default();
  o.name = "sep", o.depth_multiplier = DM, o.padding = "same", o.strides[0] = 2;
  o.strides[1] = 1;
  gr_output y = gr_separable_conv2d_layer(g, x, F, KH, KW, &o);
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_output dk = var(g, "sep/depthwise_kernel"), pk = var(g, "sep/pointwise_kernel"),
            b = var(g, "sep/bias");
  GR_CHECK(gt_inferred(dk, GR_F64, gr_shape_make(4, (int64_t[]){KH, KW, C, DM})));
  GR_CHECK(gt_inferred(pk, GR_F64, gr_shape_make(4, (int64_t[]){1, 1, C * DM, F})));
  GR_CHECK_EQ_INT(count_variables(g), 3);
  int64_t oh, ow, pt, pl;
  gt_window_dim(H, KH, 2, 1, "SAME", 0, 0, &oh, &pt);
  gt_window_dim(W, KW, 1, 1, "SAME", 0, 0, &ow, &pl);
  gr_tensor xv = gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){N, H, W, C}), -1, 1);
  gr_tensor bv = gt_random(&rng, GR_F64, gr_shape_make(1, (int64_t[]){F}), -1, 1);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_tensor out[3];
  GR_CHECK(run(s, (gr_feed[]){{x, &xv}, {b, &bv}}, 2, (gr_output[]){y, dk, pk}, 3, out));
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < oh; i++)
      for (int64_t j = 0; j < ow; j++)
        for (int64_t f = 0; f < F; f++) {
          double v = at(&bv, f);
          for (int64_t c = 0; c < C; c++)
            for (int64_t m = 0; m < DM; m++) {
              double d = 0; /* depthwise: channel c by its filter m */
              for (int64_t a = 0; a < KH; a++)
                for (int64_t bb = 0; bb < KW; bb++)
                  d += px(&xv, n, i * 2 - pt + a, j - pl + bb, c, C) *
                       at(&out[1], ((a * KW + bb) * C + c) * DM + m);
              v += d * at(&out[2], (c * DM + m) * F + f);
            }
          GR_CHECK_NEAR(at(&out[0], ((n * oh + i) * ow + j) * F + f), v, 1e-12);
        }
  gr_session_free(s);
  check_gradients("separable_conv2d", g, weighted_sum(g, y), (gr_output[]){dk, pk, b, x}, 4,
                  (gr_feed[]){{x, &xv}}, 1, 1e-5);
  for (int i = 0; i < 3; i++) gr_tensor_release(&out[i]);
  gr_tensor_release(&xv), gr_tensor_release(&bv);
  gr_graph_free(g);
}

/* ---- batch_norm -------------------------------------------------------------------------------
 */

static void test_batch_norm(void) {
  enum { R = 6, CH = 3 };
  const double mom = 0.9, eps = 1e-3;
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F64, gr_shape_make(4, (int64_t[]){R, 2, 1, CH}));
  gr_layer_options o = gr_layer_options_default();
  o.name = "bn", o.momentum = mom;
  gr_output y = gr_batch_norm_layer(g, x, &o);
  o.training = false; /* the same layer applied in inference */
  gr_output yi = gr_batch_norm_layer(g, x, &o);
  GR_CHECK(gr_graph_error(g) == NULL);
  GR_CHECK_EQ_INT(count_variables(g), 4);
  gr_output gamma = var(g, "bn/gamma"), beta = var(g, "bn/beta"), mm = var(g, "bn/moving_mean"),
            mv = var(g, "bn/moving_variance");
  gr_tensor xv = gt_random(&rng, GR_F64, gr_shape_make(4, (int64_t[]){R, 2, 1, CH}), -2, 3);
  gr_tensor gv = gt_random(&rng, GR_F64, gr_shape_make(1, (int64_t[]){CH}), 0.5, 2);
  gr_tensor bv = gt_random(&rng, GR_F64, gr_shape_make(1, (int64_t[]){CH}), -1, 1);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_tensor init[4], out, stats[2], inf;
  GR_CHECK(run(s, NULL, 0, (gr_output[]){gamma, beta, mm, mv}, 4, init));
  for (int c = 0; c < CH; c++) /* Keras: ones, zeros, zeros, ones */
    GR_CHECK(at(&init[0], c) == 1 && at(&init[1], c) == 0 && at(&init[2], c) == 0 &&
             at(&init[3], c) == 1);
  gr_feed f[3] = {{x, &xv}, {gamma, &gv}, {beta, &bv}};
  GR_CHECK(run(s, f, 3, &y, 1, &out)); /* one training step: updates the moving statistics */
  GR_CHECK(run(s, NULL, 0, (gr_output[]){mm, mv}, 2, stats));
  GR_CHECK(run(s, f, 3, &yi, 1, &inf));
  for (int c = 0; c < CH; c++) {
    double mean = 0, ss = 0;
    for (int64_t r = 0; r < 2 * R; r++) mean += at(&xv, r * CH + c);
    mean /= 2 * R;
    for (int64_t r = 0; r < 2 * R; r++) ss += pow(at(&xv, r * CH + c) - mean, 2);
    double var_b = ss / (2 * R), var_u = ss / (2 * R - 1);
    GR_CHECK_NEAR(at(&stats[0], c), (1 - mom) * mean, 1e-12);
    GR_CHECK_NEAR(at(&stats[1], c), mom + (1 - mom) * var_u, 1e-12);
    for (int64_t r = 0; r < 2 * R; r++) {
      double xr = at(&xv, r * CH + c);
      GR_CHECK_NEAR(at(&out, r * CH + c), at(&gv, c) * (xr - mean) / sqrt(var_b + eps) + at(&bv, c),
                    1e-12);
      GR_CHECK_NEAR(
          at(&inf, r * CH + c),
          at(&gv, c) * (xr - at(&stats[0], c)) / sqrt(at(&stats[1], c) + eps) + at(&bv, c), 1e-12);
    }
  }
  gr_session_free(s);
  check_gradients("batch_norm", g, weighted_sum(g, y), (gr_output[]){gamma, beta, x}, 3,
                  (gr_feed[]){{x, &xv}}, 1, 1e-5);
  for (int i = 0; i < 4; i++) gr_tensor_release(&init[i]);
  gr_tensor_release(&out), gr_tensor_release(&inf);
  gr_tensor_release(&stats[0]), gr_tensor_release(&stats[1]);
  gr_tensor_release(&xv), gr_tensor_release(&gv), gr_tensor_release(&bv);
  gr_graph_free(g);
}

/* ---- reuse, errors, where variables are made --------------------------------------------------
 */

static void test_reuse(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(2, (int64_t[]){-1, 6}));
  gr_output x2 = gr_placeholder(g, "x2", GR_F32, gr_shape_make(2, (int64_t[]){-1, 5}));
  gr_layer_options o = gr_layer_options_default();
  o.name = "h";
  gr_output a = gr_dense_layer(g, x, 3, &o);
  gr_graph_push_name_scope(g, "test_pass");
  gr_output b = gr_dense_layer(g, x, 3, &o); /* GR_LAYER_AUTO: the same variables */
  gr_graph_pop_name_scope(g);
  GR_CHECK(a.node && b.node && a.node != b.node);
  GR_CHECK_EQ_INT(count_variables(g), 2);
  GR_CHECK(gr_graph_error(g) == NULL);
  /* the same values for the same input */
  gr_tensor xv = gt_random(&rng, GR_F32, gr_shape_make(2, (int64_t[]){4, 6}), -1, 1), out[2];
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK(run(s, &(gr_feed){x, &xv}, 1, (gr_output[]){a, b}, 2, out));
  GR_CHECK(gt_bit_equal(&out[0], &out[1]));
  gr_session_free(s);
  gr_tensor_release(&out[0]), gr_tensor_release(&out[1]), gr_tensor_release(&xv);
  /* another input size: an error naming both shapes */
  GR_CHECK(fails(gr_dense_layer(g, x2, 3, &o), g, GR_ERR_SHAPE,
                 "dense 'h': variable 'h/kernel' is f32 [6, 3], but this call needs f32 [5, 3]"));
  o.reuse = GR_LAYER_NEW;
  GR_CHECK(fails(gr_dense_layer(g, x, 3, &o), g, GR_ERR_ALREADY_EXISTS,
                 "variable 'h/kernel' exists already"));
  o.reuse = GR_LAYER_REUSE, o.name = "nothing_here";
  GR_CHECK(fails(gr_dense_layer(g, x, 3, &o), g, GR_ERR_NOT_FOUND,
                 "no variable 'nothing_here/kernel' to reuse"));
  o.reuse = GR_LAYER_AUTO, o.name = "x"; /* a node that is not a variable */
  gr_output xk = gr_placeholder(g, "x/kernel", GR_F32, gr_shape_make(2, (int64_t[]){6, 3}));
  GR_CHECK(xk.node != NULL);
  GR_CHECK(fails(gr_dense_layer(g, x, 3, &o), g, GR_ERR_ALREADY_EXISTS,
                 "node 'x/kernel' (op placeholder) exists and is not the layer's"));
  /* bad calls */
  o.name = NULL;
  GR_CHECK(fails(gr_dense_layer(g, x, 3, &o), g, GR_ERR_INVALID_ARGUMENT,
                 "dense: a layer with variables needs a name"));
  o.name = "c";
  GR_CHECK(fails(gr_conv2d_layer(g, x, 3, 3, 3, &o), g, GR_ERR_SHAPE,
                 "conv2d 'c': the input 'x' is [?, 6]; it takes rank 4"));
  gr_output img = gr_placeholder(g, "img", GR_F32, gr_shape_make(4, (int64_t[]){-1, 5, 5, -1}));
  GR_CHECK(fails(gr_conv2d_layer(g, img, 3, 3, 3, &o), g, GR_ERR_SHAPE,
                 "needs its last dimension to size its variables"));
  gr_output ints = gr_placeholder(g, "ints", GR_I32, gr_shape_make(2, (int64_t[]){2, 2}));
  GR_CHECK(fails(gr_dense_layer(g, ints, 3, &o), g, GR_ERR_DTYPE,
                 "the input 'ints' is i32; a layer takes f32 or f64"));
  GR_CHECK(
      fails(gr_dense_layer(g, x, 0, &o), g, GR_ERR_INVALID_ARGUMENT, "units must be >= 1, got 0"));
  o.padding = "full";
  gr_output img3 = gr_placeholder(g, "img3", GR_F32, gr_shape_make(4, (int64_t[]){-1, 5, 5, 3}));
  GR_CHECK(fails(gr_conv2d_layer(g, img3, 3, 3, 3, &o), g, GR_ERR_INVALID_ARGUMENT,
                 "padding must be \"valid\" or \"same\", got \"full\""));
  gr_graph_free(g);
}

/* A layer first built inside control dependencies, a name scope and a
 * device scope: its variables are outside the dependencies and the scope,
 * under the device scope (as gr_variable's). */
static void test_where_variables_go(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(2, (int64_t[]){-1, 4}));
  gr_output dep = gr_no_op(g, "dep");
  gr_graph_push_control_deps(g, &dep, 1);
  gr_graph_push_name_scope(g, "outer");
  gr_graph_push_device_scope(g, "/job:ps/task:0");
  gr_layer_options o = gr_layer_options_default();
  o.name = "net/d";
  gr_output y = gr_dense_layer(g, x, 2, &o);
  gr_graph_pop_device_scope(g);
  gr_graph_pop_name_scope(g);
  gr_graph_pop_control_deps(g);
  GR_CHECK(y.node != NULL && gr_graph_error(g) == NULL);
  gr_output k = var(g, "net/d/kernel");
  GR_CHECK_EQ_INT(k.node->num_control_inputs, 0);
  GR_CHECK(strcmp(k.node->requested_device, "/job:ps/task:0") == 0);
  GR_CHECK(strncmp(y.node->name, "outer/", 6) == 0); /* the other nodes: in the scope */
  gr_graph_free(g);
}

static void test_rescaling_and_activations(void) {
  gr_graph *g = gr_graph_new();
  gr_tensor xv = gt_random(&rng, GR_F32, gr_shape_make(2, (int64_t[]){3, 4}), -3, 3);
  gr_output x = gr_const(g, &xv);
  gr_output r = gr_rescaling(g, x, 1.0 / 255, -0.5);
  gr_output sm = gr_activation_apply(g, x, GR_ACT_SOFTMAX);
  gr_activation a;
  GR_CHECK(gr_activation_parse("sigmoid", &a) && a == GR_ACT_SIGMOID);
  GR_CHECK(!gr_activation_parse("gelu", &a));
  gr_tensor out[2];
  gr_error err;
  GR_CHECK_OK(gt_run_graph(g, (gr_output[]){r, sm}, 2, out, &err), err);
  for (int i = 0; i < 3; i++) {
    double sum = 0;
    for (int j = 0; j < 4; j++) {
      GR_CHECK_NEAR(at(&out[0], i * 4 + j), (float)at(&xv, i * 4 + j) * (float)(1.0 / 255) - 0.5,
                    1e-6);
      sum += at(&out[1], i * 4 + j);
    }
    GR_CHECK_NEAR(sum, 1, 1e-6);
  }
  gr_tensor_release(&out[0]), gr_tensor_release(&out[1]), gr_tensor_release(&xv);
  gr_graph_free(g);
}

/* Roles: weights trainable, moving statistics and integers not, slots,
 * copies and the global step not parameters. */
static void test_variable_roles(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(2, (int64_t[]){8, 4}));
  gr_layer_options o = gr_layer_options_default();
  o.name = "d";
  gr_output h = gr_dense_layer(g, x, 3, &o);
  o.name = "bn";
  h = gr_batch_norm_layer(g, h, &o);
  gr_variable(g, "counter", gr_const_i32(g, 0));
  gr_global_step(g);
  gr_optimizer opt = {.kind = GR_OPT_ADAM, .learning_rate = 0.01};
  gr_output train = gr_minimize(g, &opt, gr_reduce_mean(g, h, NULL, 0, false), NULL, 0);
  GR_CHECK(train.node && gr_graph_error(g) == NULL);
  int n = gr_graph_num_nodes(g);
  unsigned char *roles = malloc((size_t)n);
  gr_variable_roles(g, 0, n, roles);
  int64_t e[GR_VAR_STEP + 1] = {0};
  for (int i = 0; i < n; i++)
    if (roles[i]) e[roles[i]] += gr_shape_num_elements(&gr_graph_node(g, i)->out_shapes[0]);
  GR_CHECK_EQ_INT(roles[var(g, "bn/moving_mean").node->id], GR_VAR_NON_TRAINABLE);
  GR_CHECK_EQ_INT(roles[var(g, "d/kernel").node->id], GR_VAR_TRAINABLE);
  GR_CHECK_EQ_INT(e[GR_VAR_TRAINABLE], 4 * 3 + 3 + 3 + 3); /* kernel, bias, gamma, beta */
  GR_CHECK_EQ_INT(e[GR_VAR_NON_TRAINABLE], 3 + 3 + 1);     /* moving stats, counter */
  GR_CHECK_EQ_INT(e[GR_VAR_SLOT], 2 * 21 + 4);             /* Adam's m, v and t of 4 */
  GR_CHECK_EQ_INT(e[GR_VAR_STEP], 1);
  free(roles);
  gr_graph_free(g);
}

int main(void) {
  gr_init();
  GR_RUN(test_dense);
  GR_RUN(test_conv2d);
  GR_RUN(test_separable_conv2d);
  GR_RUN(test_batch_norm);
  GR_RUN(test_reuse);
  GR_RUN(test_where_variables_go);
  GR_RUN(test_rescaling_and_activations);
  GR_RUN(test_variable_roles);
  return gr_test_finish();
}
