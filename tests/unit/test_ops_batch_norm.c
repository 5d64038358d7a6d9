/* Tests of ops/batch_norm.c and ops/dropout.c: batch_norm in training
 * (batch statistics, moving averages updated in the step by update nodes of
 * their own, bit for bit from the double statistics) and inference (moving
 * statistics, nothing updated) against a double reference, the moving
 * statistics on another device than the batch norm giving the bits of one
 * device, updates once per iteration in a while loop, gradients by finite
 * differences (on one device and spread over two), NCHW against NHWC, bad
 * input, a serialized graph without updates refused; dropout's keep rate,
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
                      0.9, 1e-3, NULL);
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

typedef struct bn_arg {
  bool training;
  const char *data_format; /* NULL: NHWC */
} bn_arg;

/* x, gamma, beta differentiated; moving statistics in variables. */
static gr_output build_bn(gr_graph *g, const gr_output *x, void *arg) {
  const bn_arg *a = arg;
  gr_shape cs = x[1].node->out_shapes[0];
  gr_dtype dt = x[0].node->out_dtypes[x[0].index];
  gr_output mm = gr_variable(g, "mm", gr_random_uniform(g, dt, cs, -1, 1, 3));
  gr_output mv = gr_variable(g, "mv", gr_random_uniform(g, dt, cs, 0.5, 2, 4));
  return gr_batch_norm(g, x[0], x[1], x[2], mm, mv, a->training, 0.9, 1e-3, a->data_format);
}

/* y, mean, rstd, the moving statistics after the step, and the gradients
 * of sum(y * y * r) for x and gamma (r: a fixed random tensor like x). */
static void bn_outputs(const gr_tensor *in, const gr_tensor *r, const bn_arg *a, gr_tensor *out) {
  gr_graph *g = gr_graph_new();
  gr_output x[3], rr = gr_const(g, r);
  gr_feed f[3];
  for (int i = 0; i < 3; i++) {
    char nm[8];
    snprintf(nm, sizeof nm, "in%d", i);
    x[i] = gr_placeholder(g, nm, in[i].dtype, in[i].shape);
    f[i] = (gr_feed){x[i], &in[i]};
  }
  gr_output y = build_bn(g, x, (void *)a), d[2];
  gr_output s = gr_reduce_sum(g, gr_mul(g, gr_mul(g, y, y), rr), NULL, 0, false);
  gr_gradients(g, &s, 1, x, 2, NULL, false, d);
  gr_output fetch[5] = {y, gr_output_at(y, 1), gr_output_at(y, 2), d[0], d[1]};
  gr_error err;
  gr_session *sess = gr_session_new(g, NULL, &err);
  GR_CHECK(sess != NULL);
  if (sess) GR_CHECK_OK(gr_session_run(sess, f, 3, fetch, 5, out, NULL, 0, &err), err);
  gr_session_free(sess);
  gr_graph_free(g);
}

/* ---- the updates of the moving statistics ------------------------------------------------- */

/* The statistics as the kernel computes them: the mean and the variance
 * with Bessel's correction, in double, the rows added in order. */
static void kernel_stats(const gr_tensor *x, int64_t c, double *mean, double *var) {
  int64_t rows = gr_tensor_num_elements(x) / c;
  for (int64_t j = 0; j < c; j++) {
    mean[j] = var[j] = 0;
    for (int64_t r = 0; r < rows; r++) mean[j] += gr_tensor_get_f64(x, r * c + j);
    mean[j] /= (double)rows;
    for (int64_t r = 0; r < rows; r++) {
      double d = gr_tensor_get_f64(x, r * c + j) - mean[j];
      var[j] += d * d;
    }
    var[j] /= (double)(rows - 1);
  }
}

/* gr_batch_norm in training: its result is an identity_n named as the
 * batch norm, colocated with batch_norm/batch_norm and waiting for one
 * moving_average_update per moving variable (attr var naming it, no device
 * of its own), which reads the f64 statistics (outputs 4, 5); one step
 * sets moving = momentum moving + (1 - momentum) batch from those doubles,
 * rounded once to the variable's dtype, bit for bit (f32 and f64). */
static void test_batch_norm_update_nodes(void) {
  enum { C = 5 };
  for (int t = 0; t < 2; t++) {
    gr_dtype dt = t ? GR_F64 : GR_F32;
    gr_shape xs = gr_shape_make(3, (int64_t[]){6, 3, C}), cs = gr_shape_make(1, (int64_t[]){C});
    gr_tensor x = gt_random(&rng, dt, xs, -3, 5), gm = gt_random(&rng, dt, cs, 0.5, 2);
    gr_tensor bt = gt_random(&rng, dt, cs, -1, 1), mm0 = gt_random(&rng, dt, cs, -1, 1);
    gr_tensor mv0 = gt_random(&rng, dt, cs, 0.5, 2);
    bn_graph b = bn_build(&x, &gm, &bt, &mm0, &mv0, true);
    gr_node *y = b.y.node, *bn = y->inputs[0].node;
    GR_CHECK(!strcmp(y->op->name, "identity_n") && !strcmp(y->name, "batch_norm"));
    GR_CHECK_EQ_INT(y->num_outputs, 6);
    GR_CHECK(!strcmp(bn->op->name, "batch_norm") && !strcmp(bn->name, "batch_norm/batch_norm"));
    GR_CHECK(y->colocate_with && !strcmp(y->colocate_with, bn->name));
    GR_CHECK_EQ_INT(y->num_control_inputs, 2);
    static const char *const names[2] = {"batch_norm/update_moving_mean",
                                         "batch_norm/update_moving_variance"};
    static const char *const vars[2] = {"mm", "mv"};
    for (int i = 0; i < 2 && y->num_control_inputs == 2; i++) {
      const gr_node *u = y->control_inputs[i];
      GR_CHECK(!strcmp(u->name, names[i]) && !strcmp(u->op->name, "moving_average_update"));
      GR_CHECK(!strcmp(gr_node_attr_string(u, "var", ""), vars[i]) && !u->requested_device[0]);
      GR_CHECK(u->num_inputs == 1 && u->inputs[0].node == bn && u->inputs[0].index == 4 + i);
      GR_CHECK(gr_node_attr_float(u, "momentum", 0) == 0.9);
    }
    gr_error err;
    gr_session *s = gr_session_new(b.g, NULL, &err);
    gr_tensor st[2], mv[2];
    GR_CHECK_OK(gr_session_run(s, &(gr_feed){b.x, &x}, 1,
                               (gr_output[]){gr_output_at(b.y, 4), gr_output_at(b.y, 5)}, 2, st,
                               NULL, 0, &err),
                err);
    GR_CHECK_OK(gr_session_run(s, NULL, 0, (gr_output[]){b.mm, b.mv}, 2, mv, NULL, 0, &err), err);
    double mean[C], var[C];
    kernel_stats(&x, C, mean, var);
    const double m = 0.9;
    for (int j = 0; j < C; j++) {
      /* the kernel's statistics (f32: sums of x - x[0] by blocks) near the
       * two-pass ones; the updates read exactly the kernel's */
      double km = gr_tensor_get_f64(&st[0], j), kv = gr_tensor_get_f64(&st[1], j);
      GR_CHECK(st[0].dtype == GR_F64 && fabs(km - mean[j]) <= 1e-12 * (1 + fabs(mean[j])));
      GR_CHECK(fabs(kv - var[j]) <= 1e-12 * (1 + var[j]));
      double wm = m * gr_tensor_get_f64(&mm0, j) + (1 - m) * km;
      double wv = m * gr_tensor_get_f64(&mv0, j) + (1 - m) * kv;
      if (dt == GR_F32) wm = (float)wm, wv = (float)wv;
      GR_CHECK_MSG(gr_tensor_get_f64(&mv[0], j) == wm,
                   "dtype %s, moving mean %d: %.17g, want %.17g", gr_dtype_name(dt), j,
                   gr_tensor_get_f64(&mv[0], j), wm);
      GR_CHECK_MSG(gr_tensor_get_f64(&mv[1], j) == wv, "dtype %s, moving variance %d",
                   gr_dtype_name(dt), j);
    }
    for (int i = 0; i < 2; i++) gr_tensor_release(&st[i]), gr_tensor_release(&mv[i]);
    gr_session_free(s);
    gr_graph_free(b.g);
    gr_tensor_release(&x), gr_tensor_release(&gm), gr_tensor_release(&bt);
    gr_tensor_release(&mm0), gr_tensor_release(&mv0);
  }
}

/* A small training graph: x [8, 4, 4, 3] through batch_norm (gamma, beta
 * trained by SGD on sum(y * y * r)), and an inference batch_norm of xt
 * reading the same moving statistics. split: the variables on device 1,
 * both batch norms on device 0 (else no pins: one device). */
typedef struct bn_train {
  gr_graph *g;
  gr_output y, loss, train, yt, vars[4]; /* gamma, beta, mm, mv */
} bn_train;

enum { BN_OUTS = 9 }; /* y, loss; yt, its f64 outputs 4 and 5; gamma, beta, mm, mv */

static void bn_train_data(gr_tensor *x, gr_tensor *xt, gr_tensor *r) {
  gt_rng g = {7};
  gr_shape xs = gr_shape_make(4, (int64_t[]){8, 4, 4, 3});
  *x = gt_random(&g, GR_F32, xs, -2, 4), *xt = gt_random(&g, GR_F32, xs, -2, 4);
  *r = gt_random(&g, GR_F32, xs, -1, 1);
}

static bn_train bn_train_build(bool split) {
  bn_train b = {.g = gr_graph_new()};
  gr_graph *g = b.g;
  gr_tensor xv, xtv, rv;
  bn_train_data(&xv, &xtv, &rv);
  gr_shape cs = gr_shape_make(1, (int64_t[]){3});
  if (split) gt_pin(g, 1);
  b.vars[0] = gr_variable(g, "gamma", gr_ones(g, GR_F32, cs));
  b.vars[1] = gr_variable(g, "beta", gr_zeros(g, GR_F32, cs));
  b.vars[2] = gr_variable(g, "mm", gr_zeros(g, GR_F32, cs));
  b.vars[3] = gr_variable(g, "mv", gr_ones(g, GR_F32, cs));
  if (split) gr_graph_pop_device_scope(g), gt_pin(g, 0);
  gr_output x = gr_const(g, &xv), xt = gr_const(g, &xtv);
  b.y = gr_batch_norm(g, x, b.vars[0], b.vars[1], b.vars[2], b.vars[3], true, 0.9, 1e-3, NULL);
  b.yt = gr_batch_norm(g, xt, b.vars[0], b.vars[1], b.vars[2], b.vars[3], false, 0.9, 1e-3, NULL);
  b.loss = gr_reduce_sum(g, gr_mul(g, gr_mul(g, b.y, b.y), gr_const(g, &rv)), NULL, 0, false);
  if (split) gr_graph_pop_device_scope(g);
  gr_optimizer opt = {.kind = GR_OPT_SGD, .learning_rate = 0.01};
  b.train = gr_minimize(g, &opt, b.loss, b.vars, 2);
  gr_tensor_release(&xv), gr_tensor_release(&xtv), gr_tensor_release(&rv);
  return b;
}

/* Where the node named `name` ran in the traced step (NULL: not found). */
static const char *ran_on(const gr_step_trace *tr, const char *name) {
  for (int i = 0; i < gr_step_trace_count(tr); i++) {
    const gr_trace_event *e = gr_step_trace_event(tr, i);
    if (!strcmp(e->node->name, name)) return e->node->assigned_device;
  }
  return NULL;
}

/* 4 training steps (y and the loss of the last into out[0..2)), then
 * inference alone: yt, its outputs 4, 5 and the variables (out[2..9)). On
 * two devices the batch norm runs on device 0, its updates on device 1,
 * where its f64 statistics are sent. */
static bool bn_train_run(bool split, gr_tensor *out) {
  bn_train b = bn_train_build(split);
  gr_error err;
  gr_session *s = split ? gt_session(b.g, 2, 2) : gr_session_new(b.g, NULL, &err);
  bool ok = s != NULL;
  for (int step = 0; ok && step < 4; step++) {
    gr_step_trace *tr = split && step == 3 ? gr_step_trace_new() : NULL;
    gr_tensor t[2];
    ok = gr_session_run_traced(s, NULL, 0, (gr_output[]){b.y, b.loss}, 2, t, &b.train, 1, tr,
                               &err) == GR_OK;
    if (!ok) fprintf(stderr, "%s\n", err.msg);
    for (int i = 0; ok && i < 2; i++) {
      if (step < 3)
        gr_tensor_release(&t[i]);
      else
        out[i] = t[i];
    }
    if (ok && tr) {
      const char *bn = ran_on(tr, "batch_norm/batch_norm");
      const char *um = ran_on(tr, "batch_norm/update_moving_mean");
      const char *uv = ran_on(tr, "batch_norm/update_moving_variance");
      GR_CHECK_MSG(bn && strstr(bn, "CPU:0"), "batch_norm ran on %s", bn ? bn : "(not run)");
      GR_CHECK_MSG(um && strstr(um, "CPU:1"), "the moving mean's update ran on %s",
                   um ? um : "(not run)");
      GR_CHECK_MSG(uv && strstr(uv, "CPU:1"), "the moving variance's update ran on %s",
                   uv ? uv : "(not run)");
      const char *rm = ran_on(tr, "_recv/batch_norm/batch_norm/4/1"); /* the f64 mean */
      GR_CHECK_MSG(rm && strstr(rm, "CPU:1"), "the f64 mean was received on %s",
                   rm ? rm : "(not sent)");
    }
    if (tr) gr_step_trace_free(tr);
  }
  gr_output inf[7] = {
      b.yt,     gr_output_at(b.yt, 4), gr_output_at(b.yt, 5), b.vars[0], b.vars[1], b.vars[2],
      b.vars[3]};
  ok = ok && gr_session_run(s, NULL, 0, inf, 7, out + 2, NULL, 0, &err) == GR_OK;
  gr_session_free(s);
  gr_graph_free(b.g);
  return ok;
}

/* The variables on device 1 and the batch norms on device 0 give the bits
 * of one device; the moving statistics moved; inference read them: y = x
 * scale + shift with scale = gamma / sqrt(mv + eps), shift = beta - mm
 * scale (to f32 rounding), its f64 outputs 4 and 5 are mm and mv, and running
 * it updated nothing. */
static void test_batch_norm_moving_stats_on_another_device(void) {
  gr_tensor one[BN_OUTS], two[BN_OUTS];
  bool ok1 = bn_train_run(false, one), ok2 = bn_train_run(true, two);
  GR_CHECK(ok1 && ok2);
  static const char *const what[BN_OUTS] = {
      "y", "loss", "inference y", "its output 4", "5", "gamma", "beta", "mm", "mv"};
  for (int i = 0; ok1 && ok2 && i < BN_OUTS; i++)
    GR_CHECK_MSG(gt_bit_equal(&two[i], &one[i]), "%s", what[i]);
  if (ok1) {
    gr_tensor x, xt, r;
    bn_train_data(&x, &xt, &r);
    const gr_tensor *yt = &one[2], *gm = &one[5], *bt = &one[6], *mm = &one[7], *mv = &one[8];
    for (int64_t j = 0; j < 3; j++) {
      double m = gr_tensor_get_f64(mm, j), v = gr_tensor_get_f64(mv, j);
      GR_CHECK(m != 0 && v != 1); /* moved */
      GR_CHECK(gr_tensor_get_f64(&one[3], j) == m && gr_tensor_get_f64(&one[4], j) == v);
      double scale = 1.0 / sqrt(v + 1e-3) * gr_tensor_get_f64(gm, j);
      double shift = gr_tensor_get_f64(bt, j) - m * scale;
      for (int64_t k = j; k < gr_tensor_num_elements(&xt); k += 3) { /* f32 arithmetic */
        double want = gr_tensor_get_f64(&xt, k) * scale + shift;
        GR_CHECK(fabs(gr_tensor_get_f64(yt, k) - want) <= 2e-6 * (1 + fabs(want)));
      }
    }
    gr_tensor_release(&x), gr_tensor_release(&xt), gr_tensor_release(&r);
  }
  for (int i = 0; i < BN_OUTS; i++) {
    if (ok1) gr_tensor_release(&one[i]);
    if (ok2) gr_tensor_release(&two[i]);
  }
}

/* NCHW against NHWC on the same data transposed: f64 batch_norm and
 * batch_norm_grad run on channels-last copies, f32 reads NCHW in place
 * (sums per channel plane, in another order, exact in double at these
 * sizes), so y, the statistics and the gradients agree bit for bit
 * (training and inference, f32 and f64, rank 4 and rank 3). */
static void test_batch_norm_nchw_matches_nhwc(void) {
  gr_shape shapes[2] = {gr_shape_make(4, (int64_t[]){3, 5, 4, 6}),
                        gr_shape_make(3, (int64_t[]){4, 7, 3})};
  for (int t = 0; t < 4; t++) {
    gr_dtype dt = t % 2 ? GR_F64 : GR_F32;
    gr_shape xs = shapes[t / 2];
    gr_shape cs = gr_shape_make(1, (int64_t[]){xs.dims[xs.rank - 1]});
    gr_tensor in[3] = {gt_random(&rng, dt, xs, -3, 5), gt_random(&rng, dt, cs, 0.5, 2),
                       gt_random(&rng, dt, cs, -1, 1)};
    gr_tensor r = gt_random(&rng, dt, xs, -1, 1);
    gr_tensor int_[3] = {gt_move_channels(&in[0], true), in[1], in[2]};
    gr_tensor rt = gt_move_channels(&r, true);
    for (int training = 0; training < 2; training++) {
      gr_tensor a[5] = {{0}}, b[5] = {{0}};
      bn_outputs(in, &r, &(bn_arg){training, NULL}, a);
      bn_outputs(int_, &rt, &(bn_arg){training, "NCHW"}, b);
      for (int i = 0; i < 5 && a[i].buf && b[i].buf; i++) {
        gr_tensor back = i == 0 || i == 3 ? gt_move_channels(&b[i], false) : b[i];
        GR_CHECK_MSG(gt_bit_equal(&back, &a[i]), "output %d, case %d, training %d", i, t, training);
        if (i == 0 || i == 3) gr_tensor_release(&back);
      }
      for (int i = 0; i < 5; i++) gr_tensor_release(&a[i]), gr_tensor_release(&b[i]);
    }
    for (int i = 0; i < 3; i++) gr_tensor_release(&in[i]);
    gr_tensor_release(&int_[0]), gr_tensor_release(&r), gr_tensor_release(&rt);
  }
}

/* NHWC, and NCHW (the channels at axis 1; second derivatives through
 * the transposes of batch_norm_grad's gradient); first derivatives also
 * with the nodes spread over two devices. */
static void test_batch_norm_gradients(void) {
  for (int t = 0; t < 4; t++) {
    bn_arg a = {t % 2, t < 2 ? NULL : "NCHW"};
    gr_shape xs[2] = {gr_shape_make(4, (int64_t[]){3, 4, 3, 5}),
                      gr_shape_make(2, (int64_t[]){6, 4})};
    for (int k = 0; k < 2; k++) {
      int64_t c = xs[k].dims[a.data_format ? 1 : xs[k].rank - 1];
      gr_shape cs = gr_shape_make(1, (int64_t[]){c});
      gr_tensor in[3] = {gt_random(&rng, GR_F64, xs[k], -2, 2), gt_random(&rng, GR_F64, cs, 0.5, 2),
                         gt_random(&rng, GR_F64, cs, -1, 1)};
      for (int order = 1; order <= 2; order++)
        GR_CHECK_MSG(gt_check_gradient("batch_norm", build_bn, &a, in, 3, order, 40, 1e-6),
                     "training %d %s shape %d order %d", a.training,
                     a.data_format ? "NCHW" : "NHWC", k, order);
      /* spread over two devices: the updates where their variables are */
      GR_CHECK_MSG(gt_check_gradient_on("batch_norm", build_bn, &a, in, 3, 1, 40, 1e-6, 2),
                   "2 devices: training %d %s shape %d", a.training,
                   a.data_format ? "NCHW" : "NHWC", k);
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
    const char *data_format, *sub;
  } bad[] = {
      {x4, c3, false, true, 1e-3, 0.9, "NHWC",
       "in training, input 'moving_mean' must be read from a variable (its update in the step "
       "names the variable); 'mm' is a placeholder"},
      {x4, gr_shape_make(1, (int64_t[]){4}), true, true, 1e-3, 0.9, "NHWC",
       "channel mismatch: input 'gamma' [4] but x [2, 4, 4, 3] has 3 channels"},
      {gr_shape_make(1, (int64_t[]){3}), c3, true, true, 1e-3, 0.9, "NHWC",
       "input 'x' must have rank >= 2 (channels last), got shape [3]"},
      {x4, gr_shape_make(2, (int64_t[]){1, 3}), true, false, 1e-3, 0.9, "NHWC",
       "input 'gamma' must have rank 1, got shape [1, 3]"},
      {x4, c3, true, true, 0, 0.9, "NHWC", "need epsilon > 0 and 0 <= momentum <= 1"},
      {x4, c3, true, true, 1e-3, 1.5, "NHWC", "momentum 1.5"},
      {x4, c3, true, true, 1e-3, 0.9, "NCHW",
       "channel mismatch: input 'gamma' [3] but x [2, 4, 4, 3] (NCHW) has 4 channels"},
      {x4, c3, true, true, 1e-3, 0.9, "HWCN", "unknown data_format 'HWCN' (expected NHWC or NCHW)"},
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
    gr_attr at[4] = {gr_attr_bool("training", bad[i].training),
                     gr_attr_float("epsilon", bad[i].eps), gr_attr_float("momentum", bad[i].mom),
                     gr_attr_string("data_format", bad[i].data_format)};
    gr_output y = gr_op(g, "batch_norm", "bn", in, 5, at, 4);
    const gr_error *e = gr_graph_error(g);
    GR_CHECK_MSG(!y.node && e, "case %zu", i);
    if (e) {
      GR_CHECK_STR_CONTAINS(e->msg, "node 'bn'");
      GR_CHECK_STR_CONTAINS(e->msg, bad[i].sub);
    }
    gr_graph_free(g);
  }
}

/* A training batch norm in a while loop (a .gr file) updates its moving
 * statistics once per iteration, before the next iteration reads the
 * normalised value, on one device and spread over two (the same bits):
 * after 3 iterations at momentum 0.5 the moving mean holds 1/8 of x0's
 * mean (the later batches, normalised, have mean 0) and the moving
 * variance the formula of the three batches' variances. */
static void test_batch_norm_in_a_loop(void) {
  const char *src = "x0 = random_normal([8, 3], seed=1)\n"
                    "mm = variable(zeros([3]))\n"
                    "mv = variable(ones([3]))\n"
                    "g = variable(ones([3]))\n"
                    "i, x = while (i = const(0, i64), x = x0; i < 3) {\n"
                    "  x = batch_norm(x, g, zeros([3]), mm, mv, momentum=0.5) * 1.5\n"
                    "  i = i + 1\n"
                    "}\n"
                    "loss = reduce_sum(x * x * x)\n"
                    "dg = gradients(loss, g)\n"
                    "control_dependencies(x) { mm1 = read_value(mm); mv1 = read_value(mv) }\n";
  gr_tensor one[5], two[5];
  bool ok1 = gt_dsl_run(src, "x0,mm1,mv1,loss,dg", 1, one);
  bool ok2 = gt_dsl_run(src, "x0,mm1,mv1,loss,dg", 2, two);
  GR_CHECK(ok1 && ok2);
  for (int i = 0; ok1 && ok2 && i < 5; i++) GR_CHECK_MSG(gt_bit_equal(&two[i], &one[i]), "%d", i);
  if (ok1) {
    double mean[3], var[3];
    kernel_stats(&one[0], 3, mean, var);
    for (int j = 0; j < 3; j++) {
      double b = var[j] * 7 / 8;                   /* biased */
      double v1 = 2.25 * 8.0 / 7 * b / (b + 1e-3); /* 1.5 x0's normalised rows, Bessel */
      double v2 = 2.25 * 8.0 / 7 * (v1 * 7 / 8) / (v1 * 7 / 8 + 1e-3);
      double want_v = 0.5 * (0.5 * (0.5 * 1 + 0.5 * var[j]) + 0.5 * v1) + 0.5 * v2;
      GR_CHECK_NEAR(gr_tensor_get_f64(&one[1], j), mean[j] / 8, 1e-6);
      GR_CHECK_NEAR(gr_tensor_get_f64(&one[2], j), want_v, 1e-5);
    }
  }
  for (int i = 0; i < 5; i++) {
    if (ok1) gr_tensor_release(&one[i]);
    if (ok2) gr_tensor_release(&two[i]);
  }
}

/* A serialized graph whose training batch norm has no updates (as a .grb
 * written before they were nodes of their own, or made by hand) is refused
 * when loaded, naming the node; the same graph with gr_batch_norm loads. */
static void test_batch_norm_graph_without_updates_refused(void) {
  for (int raw = 0; raw < 2; raw++) {
    gr_graph *g = gr_graph_new();
    gr_shape cs = gr_shape_make(1, (int64_t[]){3});
    gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(2, (int64_t[]){4, 3}));
    gr_output one = gr_ones(g, GR_F32, cs), zero = gr_zeros(g, GR_F32, cs);
    gr_output in[5] = {x, one, zero, gr_variable(g, "mm", zero), gr_variable(g, "mv", one)};
    gr_output y = raw ? gr_graph_add_node(g, gr_ops_find("batch_norm"), "bn", in, 5, NULL, 0)
                      : gr_batch_norm(g, in[0], in[1], in[2], in[3], in[4], true, 0.9, 1e-3, NULL);
    GR_CHECK(y.node != NULL);
    void *data = NULL;
    size_t size = 0;
    gr_error err;
    GR_CHECK_OK(gr_wire_encode_graph(g, NULL, &data, &size, &err), err);
    gr_graph *back = gr_graph_new();
    gr_dsl_program *p = NULL;
    gr_status st = gr_dsl_load_buffer("old.grb", data, size, back, NULL, &p, &err);
    if (raw) {
      GR_CHECK(st != GR_OK);
      if (st != GR_OK) {
        GR_CHECK_STR_CONTAINS(err.msg, "old.grb: serialized graph: batch norm 'bn' trains with "
                                       "update_moving, but no moving_average_update reads");
        GR_CHECK_STR_CONTAINS(err.msg, "export it again from its .gr file");
      }
    } else {
      GR_CHECK_OK(st, err);
    }
    gr_dsl_program_free(p);
    gr_graph_free(back);
    free(data);
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
  GR_RUN(test_batch_norm_update_nodes);
  GR_RUN(test_batch_norm_moving_stats_on_another_device);
  GR_RUN(test_batch_norm_in_a_loop);
  GR_RUN(test_batch_norm_nchw_matches_nhwc);
  GR_RUN(test_batch_norm_gradients);
  GR_RUN(test_batch_norm_errors);
  GR_RUN(test_batch_norm_graph_without_updates_refused);
  GR_RUN(test_dropout_rate_and_determinism);
  GR_RUN(test_dropout_gradient_and_errors);
  return gr_test_finish();
}
