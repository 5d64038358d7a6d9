/* Executor overhead and inter-op parallelism.
 *
 * 1. A chain of 10,000 tiny (scalar) adds: time per node, i.e. everything the
 *    executor does around a kernel that does almost nothing.
 * 2. A wide graph of 16 independent 256x256 matmuls: time on 1 inter-op
 *    thread divided by time on 2 (BLAS single-threaded in both).
 *
 * Last line: executor: ns_per_node=N wide_speedup=S
 *
 *   bench_executor [--smoke] [--only chain|wide] [--reps N]
 *
 * --only runs one part (its figure only on the last line); --reps sets the
 * chain's timed runs (after two warm-up runs). The chain alone under
 * `valgrind --tool=callgrind` counts instructions per node: the difference
 * between --reps 20 and --reps 10, divided by 10 runs of 10,002 nodes.
 */
#include <graphrun.h>
#include <stdio.h>
#include <string.h>

#include "bench_util.h"

static void die(const gr_error *e) {
  fprintf(stderr, "bench_executor: %s\n", e->msg);
  exit(1);
}

static double chain_ns_per_node(int len, int reps) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output one = gr_const_f32(g, 1);
  gr_output h = x;
  for (int i = 0; i < len; i++) h = gr_add(g, h, one);
  gr_error err;
  gr_session_options o = {.inter_op_threads = 1};
  gr_session *s = gr_session_new(g, &o, &err);
  if (!s) die(&err);
  gr_tensor xv = gr_tensor_scalar_f32(0), out;
  gr_feed f = {x, &xv};
  double *t = malloc(sizeof(double) * (size_t)reps);
  for (int r = -2; r < reps; r++) { /* two warm-up runs */
    double t0 = bench_now();
    if (gr_session_run(s, &f, 1, &h, 1, &out, NULL, 0, &err) != GR_OK) die(&err);
    double dt = bench_now() - t0;
    if (gr_tensor_get_f64(&out, 0) != len) {
      fprintf(stderr, "bench_executor: wrong result %g\n", gr_tensor_get_f64(&out, 0));
      exit(1);
    }
    gr_tensor_release(&out);
    if (r >= 0) t[r] = dt;
  }
  int nodes = len + 2; /* the adds, the constant and the feed */
  double ns = bench_median(t, reps) / nodes * 1e9;
  free(t);
  gr_tensor_release(&xv);
  gr_session_free(s);
  gr_graph_free(g);
  return ns;
}

static double wide_seconds(int threads, int width, int n, int reps) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, 1);
  gr_output a = gr_placeholder(g, "a", GR_F32, (gr_shape){2, {n, n}});
  gr_output *outs = malloc(sizeof(gr_output) * (size_t)width);
  for (int i = 0; i < width; i++)
    outs[i] = gr_matmul(g, a, gr_random_uniform(g, GR_F32, (gr_shape){2, {n, n}}, -1, 1, i), false,
                        false);
  gr_output target = gr_group(g, "all", outs, width);
  gr_error err;
  gr_session_options o = {.inter_op_threads = threads, .intra_op_threads = 1};
  gr_session *s = gr_session_new(g, &o, &err);
  if (!s) die(&err);
  gr_tensor av;
  gr_tensor_alloc_zeros(&av, GR_F32, &(gr_shape){2, {n, n}}, &err);
  gr_feed f = {a, &av};
  double *t = malloc(sizeof(double) * (size_t)reps);
  for (int r = -1; r < reps; r++) {
    double t0 = bench_now();
    if (gr_session_run(s, &f, 1, NULL, 0, NULL, &target, 1, &err) != GR_OK) die(&err);
    if (r >= 0) t[r] = bench_now() - t0;
  }
  double med = bench_median(t, reps);
  free(t);
  free(outs);
  gr_tensor_release(&av);
  gr_session_free(s);
  gr_graph_free(g);
  return med;
}

static void usage(void) {
  fprintf(stderr, "usage: bench_executor [--smoke] [--only chain|wide] [--reps N]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int smoke = bench_is_smoke(argc, argv);
  int len = smoke ? 100 : 10000, reps = smoke ? 3 : 200;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--smoke")) continue;
    if (!strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i];
      if (strcmp(only, "chain") && strcmp(only, "wide")) usage();
    } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
      if (reps < 1) usage();
    } else {
      usage();
    }
  }
  bool chain = !only || !strcmp(only, "chain"), wide = !only || !strcmp(only, "wide");
  double ns = 0, t1 = 0, t2 = 0;
  if (chain) {
    ns = chain_ns_per_node(len, reps);
    printf("chain of %d scalar adds: %.1f ns per node (median of %d runs)\n", len, ns, reps);
  }
  if (wide) {
    int width = smoke ? 4 : 16, n = smoke ? 32 : 256, wreps = smoke ? 2 : 15;
    t1 = wide_seconds(1, width, n, wreps);
    t2 = wide_seconds(2, width, n, wreps);
    printf("%d independent %dx%d matmuls: %.2f ms on 1 inter-op thread, %.2f ms on 2\n", width, n,
           n, t1 * 1e3, t2 * 1e3);
  }
  if (chain && wide)
    printf("executor: ns_per_node=%.1f wide_speedup=%.2f\n", ns, t1 / t2);
  else if (chain)
    printf("executor: ns_per_node=%.1f\n", ns);
  else
    printf("executor: wide_speedup=%.2f\n", t1 / t2);
  return 0;
}
