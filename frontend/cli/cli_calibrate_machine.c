/* What graphrun calibrate measures of this machine's devices: a matmul op
 * for flop/s, a chain of tiny ops for the per-op overhead, memcpy for the
 * memory bandwidth, and which OpenBLAS kernels ran (cli_calibrate.h). */
#include <stdlib.h>
#include <string.h>

#include "cli_calibrate.h"
#include "cli_util.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* flop/s of the matmul op (n x n, f32, one intra-op thread). */
double cli_measure_flops(int n, int reps, gr_error *err) {
  gr_graph *g = gr_graph_new();
  gr_shape sh = {2, {n, n}};
  gr_output a = gr_placeholder(g, "a", GR_F32, sh), b = gr_placeholder(g, "b", GR_F32, sh);
  gr_output y = gr_matmul(g, a, b, false, false);
  gr_tensor ta, tb;
  double result = -1;
  if (gr_tensor_alloc(&ta, GR_F32, &sh, err) != GR_OK) goto out_graph;
  if (gr_tensor_alloc(&tb, GR_F32, &sh, err) != GR_OK) goto out_a;
  float *pa = gr_tensor_data(&ta), *pb = gr_tensor_data(&tb);
  for (int64_t i = 0; i < (int64_t)n * n; i++) pa[i] = (float)(i % 7) * 0.25f, pb[i] = 1.0f;
  gr_session_options o = {.inter_op_threads = 1, .intra_op_threads = 1, .num_devices = 1};
  gr_session *s = gr_session_new(g, &o, err);
  if (!s) goto out_b;
  gr_feed feeds[2] = {{a, &ta}, {b, &tb}};
  double *t = gr_alloc_array((size_t)reps, sizeof(double));
  if (!t) goto out_s;
  int k;
  for (k = 0; k < reps; k++) {
    gr_tensor out;
    double t0 = cli_now();
    if (gr_session_run(s, feeds, 2, &y, 1, &out, NULL, 0, err) != GR_OK) break;
    t[k] = cli_now() - t0;
    gr_tensor_release(&out);
  }
  if (k == reps) result = 2.0 * n * n * (double)n / median(t, reps);
  free(t);
out_s:
  gr_session_free(s);
out_b:
  gr_tensor_release(&tb);
out_a:
  gr_tensor_release(&ta);
out_graph:
  gr_graph_free(g);
  return result;
}

/* Seconds per tiny op: a chain of neg on a scalar. */
double cli_measure_overhead(gr_error *err) {
  enum { N = 2000, REPS = 15 };
  gr_graph *g = gr_graph_new();
  gr_output x = gr_const_f32(g, 1);
  for (int i = 0; i < N; i++) x = gr_neg(g, x);
  gr_session_options o = {.inter_op_threads = 1, .intra_op_threads = 1, .num_devices = 1};
  gr_session *s = gr_session_new(g, &o, err);
  double t[REPS], result = -1;
  int k = 0;
  if (s)
    for (k = 0; k < REPS; k++) {
      gr_tensor out;
      double t0 = cli_now();
      if (gr_session_run(s, NULL, 0, &x, 1, &out, NULL, 0, err) != GR_OK) break;
      t[k] = (cli_now() - t0) / N;
      gr_tensor_release(&out);
    }
  if (s && k == REPS) result = median(t, REPS);
  gr_session_free(s);
  gr_graph_free(g);
  return result;
}

/* Bytes per second of memcpy (read + written counts once: a tensor copy). */
double cli_measure_memcpy(size_t bytes, int reps, double *small_latency) {
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b) {
    free(a);
    free(b);
    return -1;
  }
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double best = 1e30;
  for (int k = 0; k < reps; k++) {
    double t0 = cli_now();
    memcpy(b, a, bytes);
    double t = cli_now() - t0;
    if (t < best) best = t;
    a[k % bytes] = b[(k * 7) % bytes]; /* keep the copies observable */
  }
  double t0 = cli_now();
  for (int k = 0; k < 10000; k++) memcpy(b + (k % 64) * 64, a + (k % 61) * 64, 64);
  *small_latency = (cli_now() - t0) / 10000;
  free(a);
  free(b);
  return (double)bytes / best;
}

/* Which OpenBLAS kernels measured the flop/s, and a hint when they are
 * narrower than the CPU's vectors. */
void cli_blas_note(void) {
  const char *better = gr_ops_blas_suggested_core();
  fprintf(stderr, "calibrate: OpenBLAS runs its %s kernels\n", gr_ops_blas_core());
  if (better)
    fprintf(stderr,
            "calibrate: note: this CPU has wider vectors than those kernels use (this OpenBLAS\n"
            "  does not know the CPU model and fell back to generic kernels): start graphrun,\n"
            "  and every program that uses OpenBLAS, with OPENBLAS_CORETYPE=%s in the\n"
            "  environment for faster matrix products (docs/training.md)\n",
            better);
}
