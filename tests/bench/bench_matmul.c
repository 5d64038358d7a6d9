/* The matmul op (through a session) against raw cblas_sgemm on the same
 * 512x512 inputs, in the same run, interleaved so both see the same machine.
 *
 * Last line: matmul: pct_of_blas=P
 */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <graphrun.h>
#include <stdio.h>

#include "bench_util.h"

int main(int argc, char **argv) {
  int smoke = bench_is_smoke(argc, argv);
  int n = smoke ? 64 : 512, reps = smoke ? 3 : 40;
  gr_graph *g = gr_graph_new();
  gr_output a = gr_placeholder(g, "a", GR_F32, (gr_shape){2, {n, n}});
  gr_output b = gr_placeholder(g, "b", GR_F32, (gr_shape){2, {n, n}});
  gr_output c = gr_matmul(g, a, b, false, false);
  gr_error err;
  gr_session_options o = {.inter_op_threads = 1, .intra_op_threads = 1};
  gr_session *s = gr_session_new(g, &o, &err);
  if (!s) {
    fprintf(stderr, "bench_matmul: %s\n", err.msg);
    return 1;
  }
  gr_tensor av, bv, out;
  gr_shape sh = {2, {n, n}};
  gr_tensor_alloc(&av, GR_F32, &sh, &err);
  gr_tensor_alloc(&bv, GR_F32, &sh, &err);
  float *pa = gr_tensor_data(&av), *pb = gr_tensor_data(&bv);
  for (int i = 0; i < n * n; i++) {
    pa[i] = (float)(((int64_t)i * 7919) % 1000) / 1000.0f - 0.5f;
    pb[i] = (float)(((int64_t)i * 104729) % 1000) / 1000.0f - 0.5f;
  }
  float *raw = aligned_alloc(64, sizeof(float) * (size_t)n * (size_t)n);
  gr_feed f[2] = {{a, &av}, {b, &bv}};
  double *t_op = malloc(sizeof(double) * (size_t)reps),
         *t_raw = malloc(sizeof(double) * (size_t)reps);
  /* |a|, |b| <= 0.5: each sum has n terms of at most 0.25 */
  double tol = 2.0 * n * FLT_EPSILON * (0.25 * n), max_diff = 0;
  for (int r = -2; r < reps; r++) {
    double t0 = bench_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, pa, n, pb, n, 0.0f, raw,
                n);
    double t1 = bench_now();
    if (gr_session_run(s, f, 2, &c, 1, &out, NULL, 0, &err) != GR_OK) {
      fprintf(stderr, "bench_matmul: %s\n", err.msg);
      return 1;
    }
    double t2 = bench_now();
    /* A product of this size is two BLAS calls on halves of the rows
     * (ops/matmul.c): the same bits as one call on some kernel sets
     * (SkylakeX), other last bits on others (Haswell's tiles depend on the
     * call's shape). So: within the rounding bound of a k-term sum. */
    const float *po = gr_tensor_data(&out);
    for (int i = 0; i < n * n; i++) {
      double d = fabs((double)po[i] - (double)raw[i]);
      if (d > tol) {
        fprintf(stderr, "bench_matmul: the op and raw sgemm disagree at %d: %g against %g\n", i,
                (double)po[i], (double)raw[i]);
        return 1;
      }
      if (d > max_diff) max_diff = d;
    }
    gr_tensor_release(&out);
    if (r >= 0) {
      t_raw[r] = t1 - t0;
      t_op[r] = t2 - t1;
    }
  }
  double mr = bench_median(t_raw, reps), mo = bench_median(t_op, reps);
  double gflop = 2.0 * n * n * n / 1e9;
  printf("%dx%d f32: raw cblas_sgemm %.3f ms (%.1f GFLOP/s), matmul op %.3f ms (%.1f GFLOP/s)\n", n,
         n, mr * 1e3, gflop / mr, mo * 1e3, gflop / mo);
  if (max_diff == 0)
    printf("the op's bits: those of one cblas_sgemm call\n");
  else
    printf("the op's bits: within %.2g of one cblas_sgemm call (its two calls' tiles differ; "
           "bound %.2g)\n",
           max_diff, tol);
  printf("matmul: pct_of_blas=%.1f\n", 100.0 * mr / mo);
  free(raw);
  free(t_op);
  free(t_raw);
  gr_tensor_release(&av);
  gr_tensor_release(&bv);
  gr_session_free(s);
  gr_graph_free(g);
  return 0;
}
