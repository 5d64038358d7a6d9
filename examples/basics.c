/* The classic first dataflow program, then a two-layer forward pass.
 *
 *   x = 2; y1 = x + 300; y2 = x - 66; y = y1 + y2    ->  238
 */
#include <graphrun.h>
#include <stdio.h>

static int fail(const char *what, const gr_error *err) {
  fprintf(stderr, "basics: %s: %s: %s\n", what, gr_status_name(err->code), err->msg);
  return 1;
}

static int first_program(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_name(g, gr_const_f32(g, 2), "x");
  gr_output y1 = gr_name(g, gr_add(g, x, gr_const_f32(g, 300)), "y1");
  gr_output y2 = gr_name(g, gr_sub(g, x, gr_const_f32(g, 66)), "y2");
  gr_output y = gr_name(g, gr_add(g, y1, y2), "y");
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  if (!s) return fail("session", &err);
  gr_tensor out;
  if (gr_session_run(s, NULL, 0, &y, 1, &out, NULL, 0, &err) != GR_OK) return fail("run", &err);
  printf("y = %g\n", gr_tensor_get_f64(&out, 0));
  gr_tensor_release(&out);
  gr_session_free(s);
  gr_graph_free(g);
  return 0;
}

/* A two-layer perceptron forward pass on a fed batch: relu(x @ w1 + b1) @ w2 + b2. */
static int two_layers(void) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, 42);
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){2, {-1, 4}});
  gr_graph_push_name_scope(g, "layer1");
  gr_output w1 = gr_variable(g, "w", gr_glorot_uniform(g, GR_F32, (gr_shape){2, {4, 8}}, 0));
  gr_output b1 = gr_variable(g, "b", gr_zeros(g, GR_F32, (gr_shape){1, {8}}));
  gr_output h = gr_relu(g, gr_bias_add(g, gr_matmul(g, x, w1, false, false), b1));
  gr_graph_pop_name_scope(g);
  gr_graph_push_name_scope(g, "layer2");
  gr_output w2 = gr_variable(g, "w", gr_glorot_uniform(g, GR_F32, (gr_shape){2, {8, 3}}, 0));
  gr_output b2 = gr_variable(g, "b", gr_zeros(g, GR_F32, (gr_shape){1, {3}}));
  gr_output logits = gr_bias_add(g, gr_matmul(g, h, w2, false, false), b2);
  gr_output probs = gr_name(g, gr_softmax(g, logits), "probs");
  gr_graph_pop_name_scope(g);
  if (gr_graph_error(g)) return fail("build", gr_graph_error(g));

  float xs[2 * 4] = {1, 2, 3, 4, -1, 0.5f, 0, 2};
  gr_tensor xv;
  gr_error err;
  if (gr_tensor_from_data(&xv, GR_F32, &(gr_shape){2, {2, 4}}, xs, &err) != GR_OK)
    return fail("tensor", &err);
  gr_session *s = gr_session_new(g, NULL, &err);
  if (!s) return fail("session", &err);
  gr_feed feed = {x, &xv};
  gr_tensor out;
  if (gr_session_run(s, &feed, 1, &probs, 1, &out, NULL, 0, &err) != GR_OK)
    return fail("run", &err);
  printf("two-layer forward pass, softmax over 3 classes for 2 examples:\n");
  for (int i = 0; i < 2; i++) {
    double sum = 0;
    printf("  [");
    for (int j = 0; j < 3; j++) {
      double p = gr_tensor_get_f64(&out, i * 3 + j);
      sum += p;
      printf("%s%.4f", j ? ", " : "", p);
    }
    printf("]  (sum %.4f)\n", sum);
  }
  gr_tensor_release(&out);
  gr_tensor_release(&xv);
  gr_session_free(s);
  gr_graph_free(g);
  return 0;
}

int main(void) {
  if (first_program()) return 1;
  return two_layers();
}
