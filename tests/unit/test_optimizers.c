/* Optimizers against the update rules computed by hand in double: SGD,
 * momentum, Nesterov momentum and Adam on a quadratic loss
 * sum((w - t)^2), whose gradient 2 (w - t) changes every step. */
#include <graphrun.h>
#include <math.h>

#include "gr_test.h"

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

int main(void) {
  GR_RUN(test_sgd);
  GR_RUN(test_momentum);
  GR_RUN(test_nesterov);
  GR_RUN(test_adam);
  GR_RUN(test_slots_and_errors);
  return gr_test_finish();
}
