/* Optimizers against the update rules computed by hand in double: SGD,
 * momentum, Nesterov momentum and Adam on a quadratic loss
 * sum((w - t)^2), whose gradient 2 (w - t) changes every step. */
#include <graphrun.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

#define N     3
#define STEPS 5

static const double w0[N] = {0.5, -1.0, 2.0}, target[N] = {1.0, 2.0, -0.5};

/* Runs STEPS training steps and returns w after each in w_out[step][i]. */
static void train(const gr_optimizer *opt, double w_out[STEPS][N], int64_t *global_step) {
  gr_graph *g = gr_graph_new();
  gr_output gs = gr_global_step(g);
  gr_output w = gr_variable(g, "w", gr_const_data(g, GR_F64, (gr_shape){1, {N}}, w0));
  gr_output t = gr_const_data(g, GR_F64, (gr_shape){1, {N}}, target);
  gr_output loss = gr_reduce_sum(g, gr_square(g, gr_sub(g, w, t)), NULL, 0, false);
  gr_output step = gr_minimize(g, opt, loss, NULL, 0);
  GR_CHECK_MSG(gr_graph_error(g) == NULL, "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  for (int k = 0; k < STEPS; k++) {
    gr_tensor out;
    GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &step, 1, &err), err);
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &w, 1, &out, NULL, 0, &err), err);
    for (int i = 0; i < N; i++) w_out[k][i] = gr_tensor_get_f64(&out, i);
    gr_tensor_release(&out);
  }
  gr_tensor out;
  GR_CHECK_OK(gr_session_run(s, NULL, 0, &gs, 1, &out, NULL, 0, &err), err);
  *global_step = (int64_t)gr_tensor_get_f64(&out, 0);
  gr_tensor_release(&out);
  gr_session_free(s);
  gr_graph_free(g);
}

static void expect(const char *name, double got[STEPS][N], double want[STEPS][N]) {
  for (int k = 0; k < STEPS; k++)
    for (int i = 0; i < N; i++)
      GR_CHECK_MSG(fabs(got[k][i] - want[k][i]) <= 1e-12 * (1 + fabs(want[k][i])),
                   "%s step %d w[%d]: %.17g, want %.17g", name, k + 1, i, got[k][i], want[k][i]);
}

static void test_sgd(void) {
  gr_optimizer opt = {.kind = GR_OPT_SGD, .learning_rate = 0.1};
  double got[STEPS][N], want[STEPS][N], w[N];
  int64_t gs;
  train(&opt, got, &gs);
  memcpy(w, w0, sizeof w);
  for (int k = 0; k < STEPS; k++)
    for (int i = 0; i < N; i++) want[k][i] = w[i] = w[i] - 0.1 * 2 * (w[i] - target[i]);
  expect("sgd", got, want);
  GR_CHECK_EQ_INT(gs, STEPS);
}

static void momentum_case(bool nesterov) {
  gr_optimizer opt = {
      .kind = GR_OPT_MOMENTUM, .learning_rate = 0.05, .momentum = 0.9, .nesterov = nesterov};
  double got[STEPS][N], want[STEPS][N], w[N], acc[N] = {0};
  int64_t gs;
  train(&opt, got, &gs);
  memcpy(w, w0, sizeof w);
  for (int k = 0; k < STEPS; k++)
    for (int i = 0; i < N; i++) {
      double grad = 2 * (w[i] - target[i]);
      acc[i] = 0.9 * acc[i] + grad;
      w[i] -= nesterov ? 0.05 * (grad + 0.9 * acc[i]) : 0.05 * acc[i];
      want[k][i] = w[i];
    }
  expect(nesterov ? "nesterov" : "momentum", got, want);
}
static void test_momentum(void) {
  momentum_case(false);
}
static void test_nesterov(void) {
  momentum_case(true);
}

static void test_adam(void) {
  gr_optimizer opt = {.kind = GR_OPT_ADAM, .learning_rate = 0.01};
  double got[STEPS][N], want[STEPS][N], w[N], m[N] = {0}, v[N] = {0};
  int64_t gs;
  train(&opt, got, &gs);
  memcpy(w, w0, sizeof w);
  for (int k = 0; k < STEPS; k++) {
    double t = k + 1, lr_t = 0.01 * sqrt(1 - pow(0.999, t)) / (1 - pow(0.9, t));
    for (int i = 0; i < N; i++) {
      double grad = 2 * (w[i] - target[i]);
      m[i] = 0.9 * m[i] + 0.1 * grad;
      v[i] = 0.999 * v[i] + 0.001 * grad * grad;
      w[i] -= lr_t * m[i] / (sqrt(v[i]) + 1e-8);
      want[k][i] = w[i];
    }
  }
  expect("adam", got, want);
}

static void test_slots_and_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_graph_push_name_scope(g, "layer");
  gr_output w = gr_variable(g, "w", gr_ones(g, GR_F32, (gr_shape){2, {2, 2}}));
  gr_graph_pop_name_scope(g);
  gr_output loss = gr_reduce_sum(g, gr_square(g, w), NULL, 0, false);
  gr_optimizer adam = {.kind = GR_OPT_ADAM, .learning_rate = 0.1};
  gr_output step = gr_minimize(g, &adam, loss, &w, 1);
  GR_CHECK(step.node != NULL);
  gr_node *m = gr_graph_find_node(g, "layer/w/adam_m");
  GR_CHECK(m != NULL && m->colocate_with && strcmp(m->colocate_with, "layer/w") == 0);
  GR_CHECK(gr_graph_find_node(g, "layer/w/adam_t") != NULL);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &step, 1, &err), err);
  gr_session_free(s);
  /* bad uses */
  gr_optimizer bad = {.kind = GR_OPT_SGD, .learning_rate = -1};
  GR_CHECK(gr_minimize(g, &bad, loss, &w, 1).node == NULL);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "learning rate");
  gr_graph_clear_error(g);
  gr_output notvar = gr_name(g, gr_const_f32(g, 1), "plain");
  gr_optimizer sgd = {.kind = GR_OPT_SGD, .learning_rate = 0.1};
  GR_CHECK(gr_minimize(g, &sgd, loss, &notvar, 1).node == NULL);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "'plain' is not a variable");
  gr_graph_free(g);
}

/* apply_sgd_matmul on its own: var -= lr op(a) op(b) for every transpose
 * pair and both float dtypes, against plain loops in double; the last four
 * cases have k = 0 (the product is zero: the variable stays). */
static void test_sgd_matmul_op(void) {
  gt_rng r = {77};
  for (int c = 0; c < 16; c++) {
    bool ta = c & 1, tb = c & 2;
    gr_dtype dt = c & 4 ? GR_F32 : GR_F64;
    int64_t m = gt_int(&r, 1, 9), n = gt_int(&r, 1, 9), k = c >= 12 ? 0 : gt_int(&r, 1, 9);
    gr_tensor a = gt_random(&r, dt, ta ? (gr_shape){2, {k, m}} : (gr_shape){2, {m, k}}, -1, 1);
    gr_tensor b = gt_random(&r, dt, tb ? (gr_shape){2, {n, k}} : (gr_shape){2, {k, n}}, -1, 1);
    gr_tensor w = gt_random(&r, dt, (gr_shape){2, {m, n}}, -1, 1);
    gr_graph *g = gr_graph_new();
    gr_output wv = gr_variable(g, "w", gr_const(g, &w));
    gr_output in[3] = {dt == GR_F32 ? gr_const_f32(g, 0.25f) : gr_const_f64(g, 0.25),
                       gr_const(g, &a), gr_const(g, &b)};
    gr_attr at[3] = {gr_attr_string("var", "w"), gr_attr_bool("transpose_a", ta),
                     gr_attr_bool("transpose_b", tb)};
    gr_output up = gr_op(g, "apply_sgd_matmul", "up", in, 3, at, 3);
    GR_CHECK_MSG(gr_graph_error(g) == NULL, "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
    gr_error err;
    gr_session *s = gr_session_new(g, NULL, &err);
    gr_tensor got, want = gt_zeros(dt, (gr_shape){2, {m, n}});
    GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &up, 1, &err), err);
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &wv, 1, &got, NULL, 0, &err), err);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0;
        for (int64_t q = 0; q < k; q++)
          acc += gr_tensor_get_f64(&a, ta ? q * m + i : i * k + q) *
                 gr_tensor_get_f64(&b, tb ? j * k + q : q * n + j);
        gr_tensor_set_f64(&want, i * n + j, gr_tensor_get_f64(&w, i * n + j) - 0.25 * acc);
      }
    GR_CHECK_MSG(gt_near(&got, &want, dt == GR_F32 ? 1e-5 : 1e-13, dt == GR_F32 ? 1e-5 : 1e-13),
                 "case %d: ta=%d tb=%d m=%lld n=%lld k=%lld", c, ta, tb, (long long)m, (long long)n,
                 (long long)k);
    gr_tensor_release(&got);
    gr_tensor_release(&want);
    gr_session_free(s);
    gr_graph_free(g);
    gr_tensor_release(&a);
    gr_tensor_release(&b);
    gr_tensor_release(&w);
  }
}

/* Counts the update ops of each kind among train's control inputs. */
static void count_updates(gr_output train, int *fused, int *plain) {
  *fused = *plain = 0;
  for (int i = 0; i < train.node->num_control_inputs; i++) {
    const char *op = train.node->control_inputs[i]->op->name;
    *fused += strcmp(op, "apply_sgd_matmul") == 0;
    *plain += strcmp(op, "apply_sgd") == 0;
  }
}

/* A one-layer model y = op(x) op(w) or op(w) op(x) in five forms, whose
 * weight gradients are matmuls of all four transpose pairs:
 *   0: x w      -> x^T g  (T, F)     1: x w^T   -> g^T x  (T, F)
 *   2: w x      -> g x^T  (F, T)     3: w^T x^T -> x^T g^T (T, T)
 *   4: x^T w    -> x g    (F, F)
 * Runs three SGD steps (fused by gr_minimize, or unfused: gr_gradients and
 * apply_sgd built by hand) and returns w after each; *fused counts the fused
 * updates. pin_apart puts w on device 1 and the product on device 0. */
static void sgd_model(int form, bool fuse, bool pin_apart, double out[3][12], int *fused) {
  gr_graph *g = gr_graph_new();
  gt_rng r = {(uint64_t)form + 5};
  gr_tensor xv = gt_random(&r, GR_F64, (gr_shape){2, {3, 3}}, -1, 1);
  bool tall = form == 1 || form == 2; /* w is [4, 3], else [3, 4] */
  gr_tensor wv = gt_random(&r, GR_F64, tall ? (gr_shape){2, {4, 3}} : (gr_shape){2, {3, 4}}, -1, 1);
  if (pin_apart) gt_pin(g, 1);
  gr_output w = gr_variable(g, "w", gr_const(g, &wv));
  if (pin_apart) gr_graph_pop_device_scope(g);
  if (pin_apart) gt_pin(g, 0);
  gr_output x = gr_const(g, &xv);
  static const bool ta[5] = {false, false, false, true, true},
                    tb[5] = {false, true, false, true, false};
  bool w_left = form == 2 || form == 3;
  gr_output y =
      w_left ? gr_matmul(g, w, x, ta[form], tb[form]) : gr_matmul(g, x, w, ta[form], tb[form]);
  if (pin_apart) gr_graph_pop_device_scope(g);
  gr_output loss = gr_reduce_sum(g, gr_square(g, gr_tanh(g, y)), NULL, 0, false);
  gr_output train;
  if (fuse) {
    gr_optimizer sgd = {.kind = GR_OPT_SGD, .learning_rate = 0.1};
    train = gr_minimize(g, &sgd, loss, &w, 1);
  } else {
    gr_output gw;
    GR_CHECK(gr_gradients(g, &loss, 1, &w, 1, NULL, true, &gw) == GR_OK);
    gr_output in[2] = {gr_const_f64(g, 0.1), gw};
    gr_attr a = gr_attr_string("var", "w");
    gr_output up = gr_op(g, "apply_sgd", NULL, in, 2, &a, 1);
    train = gr_group(g, "train", &up, 1);
  }
  GR_CHECK_MSG(gr_graph_error(g) == NULL, "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  int plain;
  count_updates(train, fused, &plain);
  GR_CHECK_EQ_INT(*fused + plain, 1);
  gr_session *s = gt_session(g, 2, 1);
  gr_error err;
  for (int step = 0; step < 3; step++) {
    gr_tensor got;
    GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &train, 1, &err), err);
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &w, 1, &got, NULL, 0, &err), err);
    for (int64_t i = 0; i < 12; i++) out[step][i] = gr_tensor_get_f64(&got, i);
    gr_tensor_release(&got);
  }
  gr_session_free(s);
  gr_graph_free(g);
  gr_tensor_release(&xv);
  gr_tensor_release(&wv);
}

static void test_minimize_fuses_sgd(void) {
  for (int form = 0; form < 5; form++) {
    double fused[3][12], plain[3][12];
    int nf;
    sgd_model(form, true, false, fused, &nf);
    GR_CHECK_MSG(nf == 1, "form %d: %d fused updates", form, nf);
    sgd_model(form, false, false, plain, &nf);
    GR_CHECK_EQ_INT(nf, 0);
    for (int st = 0; st < 3; st++)
      for (int i = 0; i < 12; i++)
        GR_CHECK_MSG(fabs(fused[st][i] - plain[st][i]) <= 1e-13 * (1 + fabs(plain[st][i])),
                     "form %d step %d w[%d]: fused %.17g, unfused %.17g", form, st, i, fused[st][i],
                     plain[st][i]);
  }
  double pinned[3][12], plain[3][12];
  int nf;
  sgd_model(0, true, true, pinned, &nf);
  GR_CHECK_MSG(nf == 0, "w pinned to another device than its gradient: %d fused", nf);
  sgd_model(0, false, false, plain, &nf);
  for (int i = 0; i < 12; i++) GR_CHECK(fabs(pinned[2][i] - plain[2][i]) <= 1e-13);
}

/* GRAPHRUN_FUSE_UPDATE=0: gr_minimize builds the unfused update, the same
 * bits as gradients and apply_sgd by hand; another value is refused. */
static void test_fuse_update_env(void) {
  double off[3][12], plain[3][12];
  int nf;
  setenv("GRAPHRUN_FUSE_UPDATE", "0", 1);
  sgd_model(1, true, false, off, &nf);
  GR_CHECK_MSG(nf == 0, "GRAPHRUN_FUSE_UPDATE=0: %d fused updates", nf);
  sgd_model(1, false, false, plain, &nf);
  GR_CHECK(memcmp(off, plain, sizeof off) == 0);
  setenv("GRAPHRUN_FUSE_UPDATE", "yes", 1);
  gr_graph *g = gr_graph_new();
  gr_output w = gr_variable(g, "w", gr_ones(g, GR_F32, (gr_shape){2, {3, 4}}));
  gr_output x = gr_ones(g, GR_F32, (gr_shape){2, {2, 3}});
  gr_output loss = gr_reduce_sum(g, gr_matmul(g, x, w, false, false), NULL, 0, false);
  gr_optimizer sgd = {.kind = GR_OPT_SGD, .learning_rate = 0.1};
  GR_CHECK(gr_minimize(g, &sgd, loss, &w, 1).node == NULL);
  GR_CHECK(gr_graph_error(g) && strstr(gr_graph_error(g)->msg, "GRAPHRUN_FUSE_UPDATE='yes'"));
  gr_graph_free(g);
  unsetenv("GRAPHRUN_FUSE_UPDATE");
  sgd_model(1, true, false, off, &nf);
  GR_CHECK_EQ_INT(nf, 1);
}

/* Fusion follows where the product is asked to run: gradient nodes are
 * colocated with their forward node and take no pin of their own when
 * gr_minimize is called outside the device scope. (a) product pinned,
 * variable not: not fused (the gemm would leave its device); (b) the whole
 * model pinned to one device: fused. */
static int fused_updates(bool pin_variable_too) {
  gr_graph *g = gr_graph_new();
  gt_pin(g, 1);
  gr_output x = gr_ones(g, GR_F32, (gr_shape){2, {2, 3}});
  if (!pin_variable_too) gr_graph_pop_device_scope(g);
  gr_output w = gr_variable(g, "w", gr_ones(g, GR_F32, (gr_shape){2, {3, 4}}));
  if (!pin_variable_too) gt_pin(g, 1);
  gr_output loss = gr_reduce_sum(g, gr_matmul(g, x, w, false, false), NULL, 0, false);
  gr_graph_pop_device_scope(g);
  gr_optimizer sgd = {.kind = GR_OPT_SGD, .learning_rate = 0.1};
  gr_output train = gr_minimize(g, &sgd, loss, &w, 1);
  GR_CHECK_MSG(gr_graph_error(g) == NULL, "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  int fused, plain;
  count_updates(train, &fused, &plain);
  GR_CHECK_EQ_INT(fused + plain, 1);
  gr_session *s = gt_session(g, 2, 1);
  gr_error err;
  GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &train, 1, &err), err);
  gr_tensor got;
  GR_CHECK_OK(gr_session_run(s, NULL, 0, &w, 1, &got, NULL, 0, &err), err);
  for (int i = 0; i < 12; i++) /* d loss / d w = column sums of x = 2 */
    GR_CHECK_NEAR(gr_tensor_get_f64(&got, i), 1 - 0.1 * 2, 1e-6);
  gr_tensor_release(&got);
  gr_session_free(s);
  gr_graph_free(g);
  return fused;
}

static void test_fusion_follows_colocation(void) {
  GR_CHECK_EQ_INT(fused_updates(false), 0);
  GR_CHECK_EQ_INT(fused_updates(true), 1);
}

/* A fused update whose product does not match the variable names both; a
 * product whose inner dimensions differ is refused when the node is built. */
static void test_sgd_matmul_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_variable(g, "w", gr_ones(g, GR_F32, (gr_shape){2, {2, 3}}));
  gr_output in[3] = {gr_const_f32(g, 0.1f), gr_ones(g, GR_F32, (gr_shape){2, {2, 5}}),
                     gr_ones(g, GR_F32, (gr_shape){2, {5, 4}})};
  gr_attr at = gr_attr_string("var", "w");
  gr_output up = gr_op(g, "apply_sgd_matmul", "up", in, 3, &at, 1);
  GR_CHECK(up.node != NULL && gr_graph_error(g) == NULL);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK(s != NULL);
  GR_CHECK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &up, 1, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "[2, 4] does not match variable 'w'");
  gr_session_free(s);
  gr_output in2[3] = {in[0], in[1], in[1]};
  GR_CHECK(gr_op(g, "apply_sgd_matmul", "bad", in2, 3, &at, 1).node == NULL);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "inner dimensions differ");
  gr_graph_free(g);
}

/* Optimizer slots are made where their variable lives, whatever device
 * scope minimize runs in; the sum of a variable's gradient contributions
 * runs with the variable (on a parameter server) unless a scope says
 * otherwise. */
static void test_slots_and_sums_follow_the_variable(void) {
  for (int scoped = 0; scoped < 2; scoped++) {
    gr_graph *g = gr_graph_new();
    gr_graph_push_device_scope(g, "/job:ps/task:0");
    gr_output w = gr_variable(g, "w", gr_ones(g, GR_F32, gr_shape_make(1, (int64_t[]){3})));
    gr_graph_pop_device_scope(g);
    gr_graph_push_device_scope(g, "/job:worker/task:1");
    gr_output a = gr_reduce_sum(g, gr_square(g, w), NULL, 0, false);
    gr_output loss = gr_add(g, a, gr_reduce_sum(g, gr_mul(g, w, w), NULL, 0, false));
    if (!scoped) gr_graph_pop_device_scope(g);
    gr_optimizer opt = {.kind = GR_OPT_ADAM, .learning_rate = 0.01};
    gr_minimize(g, &opt, loss, NULL, 0);
    if (scoped) gr_graph_pop_device_scope(g);
    GR_CHECK(!gr_graph_error(g));
    const char *slots[] = {"w/adam_m", "w/adam_v", "w/adam_t"};
    for (int i = 0; i < 3; i++) {
      gr_node *sl = gr_graph_find_node(g, slots[i]);
      GR_CHECK_MSG(sl && strcmp(gr_graph_resolve_device(g, sl), "/job:ps/task:0") == 0,
                   "%s on '%s'", slots[i], sl ? gr_graph_resolve_device(g, sl) : "?");
    }
    gr_node *sum = NULL; /* the gradient the update reads: the sum of 3 contributions */
    for (int id = 0; id < gr_graph_num_nodes(g); id++) {
      gr_node *u = gr_graph_node(g, id);
      if (strcmp(u->op->name, "apply_adam") == 0) sum = u->inputs[1].node;
    }
    GR_CHECK(sum && strcmp(sum->op->name, "add_n") == 0);
    if (sum)
      GR_CHECK_MSG(strcmp(gr_graph_resolve_device(g, sum),
                          scoped ? "/job:worker/task:1" : "/job:ps/task:0") == 0,
                   "the sum runs on '%s'", gr_graph_resolve_device(g, sum));
    gr_graph_free(g);
  }
}

/* Runs a .gr text's `train` target once and returns the f64 value of each
 * name in vals (after the step). */
static void train_once(const char *text, const char *const *names, int n, double *vals) {
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error err;
  GR_CHECK_OK(gr_dsl_load_string("t.gr", text, g, NULL, &p, &err), err);
  gr_session *s = p ? gr_session_new(g, NULL, &err) : NULL;
  gr_output train, o;
  GR_CHECK(s && gr_dsl_lookup(p, "train", &train));
  if (s) GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &train, 1, &err), err);
  for (int i = 0; s && i < n; i++) {
    gr_tensor t;
    GR_CHECK(gr_dsl_lookup(p, names[i], &o));
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &o, 1, &t, NULL, 0, &err), err);
    vals[i] = gr_tensor_get_f64(&t, 0);
    gr_tensor_release(&t);
  }
  gr_session_free(s);
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

/* A variable read only inside a loop's body is trained too: minimize finds
 * it through the loop's back edge. loss = w^3 v (the loop multiplies by w
 * three times): d/dw = 3 w^2 v = 12, d/dv = w^3 = 8. */
static void test_minimize_finds_loop_variables(void) {
  double got[2];
  train_once(
      "w = variable(const(2.0, f64))\n"
      "v = variable(const(1.0, f64))\n"
      "i, r = while (i = const(0, i32), x = const(1.0, f64); i < 3) { i = i + 1; x = x * w }\n"
      "loss = r * v\n"
      "train = minimize(loss, sgd(0.01))\n",
      (const char *const[]){"w", "v"}, 2, got);
  GR_CHECK_MSG(got[0] == 2.0 - 0.01 * 12 && got[1] == 1.0 - 0.01 * 8, "w %.17g, v %.17g", got[0],
               got[1]);
}

/* Slots are made outside the enclosing control dependencies (TensorFlow's
 * init_scope): initialising them does not run the loss a second time, so a
 * batch norm's moving mean is updated once in the first step. */
static void test_slots_outside_control_dependencies(void) {
  double got[2];
  train_once("x = const([[1.0], [3.0]], f64)\n"
             "gamma = variable(ones([1], f64))\n"
             "mm = variable(zeros([1], f64))\n"
             "mv = variable(ones([1], f64))\n"
             "y, mean, rstd, var, m64, v64 = batch_norm(x, gamma, zeros([1], f64), mm, mv, "
             "momentum=0.9)\n"
             "loss = reduce_mean(square(y))\n"
             "control_dependencies(loss) { train = minimize(loss, momentum(0.05, momentum=0.9)) }\n"
             "m = reduce_sum(mm)\n",
             (const char *const[]){"m"}, 1, got);
  GR_CHECK_MSG(fabs(got[0] - 0.2) < 1e-12, "moving mean %.17g, want 0.1 * 2 (one update)", got[0]);
}

int main(void) {
  GR_RUN(test_sgd);
  GR_RUN(test_momentum);
  GR_RUN(test_nesterov);
  GR_RUN(test_adam);
  GR_RUN(test_slots_and_errors);
  GR_RUN(test_sgd_matmul_op);
  GR_RUN(test_minimize_fuses_sgd);
  GR_RUN(test_fuse_update_env);
  GR_RUN(test_fusion_follows_colocation);
  GR_RUN(test_sgd_matmul_errors);
  GR_RUN(test_slots_and_sums_follow_the_variable);
  GR_RUN(test_minimize_finds_loop_variables);
  GR_RUN(test_slots_outside_control_dependencies);
  return gr_test_finish();
}
