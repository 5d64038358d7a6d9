/* An empty while loop (i = 0; while i < N: i += 1) of 1,000,000 iterations,
 * on one inter-op thread: the cost of one iteration of the control-flow
 * machinery (merge, condition, switch, body, next_iteration).
 *
 * Last line: loop: ns_per_iteration=N
 */
#include <graphrun.h>
#include <stdio.h>

#include "bench_util.h"

static gr_output cond(gr_graph *g, void *a, const gr_output *v) {
  return gr_less(g, v[0], *(gr_output *)a);
}
static void body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
}

int main(int argc, char **argv) {
  int64_t n = bench_is_smoke(argc, argv) ? 1000 : 1000000;
  gr_graph *g = gr_graph_new();
  gr_output limit = gr_placeholder(g, "n", GR_I64, gr_shape_scalar());
  gr_output i = gr_const_i64(g, 0);
  gr_while_loop(g, cond, body, &limit, 1, &i, 0);
  gr_error err;
  gr_session_options o = {.inter_op_threads = 1};
  gr_session *s = gr_session_new(g, &o, &err);
  if (!s) {
    fprintf(stderr, "bench_loop: %s\n", err.msg);
    return 1;
  }
  gr_tensor nv = gr_tensor_scalar_i64(n), out;
  gr_feed f = {limit, &nv};
  double t[5];
  for (int r = 0; r < 5; r++) {
    double t0 = bench_now();
    if (gr_session_run(s, &f, 1, &i, 1, &out, NULL, 0, &err) != GR_OK) {
      fprintf(stderr, "bench_loop: %s\n", err.msg);
      return 1;
    }
    t[r] = bench_now() - t0;
    if (gr_tensor_get_f64(&out, 0) != (double)n) {
      fprintf(stderr, "bench_loop: wrong result\n");
      return 1;
    }
    gr_tensor_release(&out);
  }
  double med = bench_median(t, 5);
  printf("empty while loop, %lld iterations: %.3f s (median of 5)\n", (long long)n, med);
  printf("loop: ns_per_iteration=%.0f\n", med / (double)n * 1e9);
  gr_tensor_release(&nv);
  gr_session_free(s);
  gr_graph_free(g);
  return 0;
}
