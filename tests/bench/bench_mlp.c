/* The MLP train step (784-256-256-10, ReLU, softmax cross-entropy, SGD 0.1)
 * in graphrun and in PyTorch (tests/bench/mlp_torch.py, Debian python3-torch)
 * on the same random data and initial weights, one thread each, at batch 32
 * and 128, measured in the same run. Also the effective GFLOP/s of the step
 * at batch 512 against raw cblas_sgemm.
 *
 * Also, per batch, the time of the step's eight matrix products alone as raw
 * cblas_sgemm calls (forward, weight gradients, input gradients of layers 2
 * and 3): no engine can train this model on this BLAS faster than that, so
 * floor = that time / PyTorch's time is the lowest ratio reachable.
 *
 * Last line: mlp: ratio_b32=R1 ratio_b128=R2 floor_b32=F1 floor_b128=F2
 *   R: graphrun time / PyTorch time; F: raw sgemm time / PyTorch time
 */
#include <cblas.h>
#include <graphrun.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"

static const int64_t sizes[4] = {784, 256, 256, 10};

static void write_npy(const char *path, const gr_tensor *t) {
  gr_error err;
  if (gr_data_write_npy(t, path, &err) != GR_OK) {
    fprintf(stderr, "bench_mlp: %s\n", err.msg);
    exit(1);
  }
}

static uint64_t lcg = 12345;
static double rnd(void) {
  lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(lcg >> 11) / 9007199254740992.0;
}

/* graphrun: returns the median seconds per step; *first_loss the first step's loss. */
static double graphrun_step(const char *dir, int batch, int steps, double *first_loss) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){2, {batch, 784}});
  gr_output y = gr_placeholder(g, "y", GR_I64, (gr_shape){1, {batch}});
  gr_output h = x;
  gr_tensor xv, yv;
  gr_error err;
  char path[512];
  snprintf(path, sizeof path, "%s/x.npy", dir);
  gr_data_load_npy(path, &xv, &err);
  snprintf(path, sizeof path, "%s/y.npy", dir);
  gr_data_load_npy(path, &yv, &err);
  for (int l = 0; l < 3; l++) {
    char name[8];
    snprintf(path, sizeof path, "%s/w%d.npy", dir, l);
    snprintf(name, sizeof name, "w%d", l);
    gr_output w = gr_variable(g, name, gr_read_npy(g, path));
    snprintf(name, sizeof name, "b%d", l);
    gr_output b = gr_variable(g, name, gr_zeros(g, GR_F32, (gr_shape){1, {sizes[l + 1]}}));
    h = gr_bias_add(g, gr_matmul(g, h, w, false, false), b);
    if (l < 2) h = gr_relu(g, h);
  }
  gr_output loss = gr_reduce_mean(g, gr_sparse_softmax_cross_entropy(g, h, y), NULL, 0, false);
  gr_optimizer sgd = {.kind = GR_OPT_SGD, .learning_rate = 0.1};
  gr_output train = gr_minimize(g, &sgd, loss, NULL, 0);
  if (gr_graph_error(g)) {
    fprintf(stderr, "bench_mlp: %s\n", gr_graph_error(g)->msg);
    exit(1);
  }
  gr_session_options o = {.inter_op_threads = 1, .intra_op_threads = 1};
  gr_session *s = gr_session_new(g, &o, &err);
  gr_feed f[2] = {{x, &xv}, {y, &yv}};
  double *t = malloc(sizeof(double) * (size_t)steps);
  for (int i = -3; i < steps; i++) {
    gr_tensor lv;
    double t0 = bench_now();
    if (gr_session_run(s, f, 2, &loss, 1, &lv, &train, 1, &err) != GR_OK) {
      fprintf(stderr, "bench_mlp: %s\n", err.msg);
      exit(1);
    }
    double dt = bench_now() - t0;
    if (i == -3) *first_loss = gr_tensor_get_f64(&lv, 0);
    gr_tensor_release(&lv);
    if (i >= 0) t[i] = dt;
  }
  double med = bench_median(t, steps);
  free(t);
  gr_tensor_release(&xv);
  gr_tensor_release(&yv);
  gr_session_free(s);
  gr_graph_free(g);
  return med;
}

static void write_data(const char *dir, int batch) {
  gr_error err;
  gr_tensor x, y;
  gr_tensor_alloc(&x, GR_F32, &(gr_shape){2, {batch, 784}}, &err);
  gr_tensor_alloc(&y, GR_I64, &(gr_shape){1, {batch}}, &err);
  for (int64_t i = 0; i < batch * 784; i++) ((float *)gr_tensor_data(&x))[i] = (float)rnd();
  for (int64_t i = 0; i < batch; i++) ((int64_t *)gr_tensor_data(&y))[i] = (int64_t)(rnd() * 10);
  char path[512];
  snprintf(path, sizeof path, "%s/x.npy", dir);
  write_npy(path, &x);
  snprintf(path, sizeof path, "%s/y.npy", dir);
  write_npy(path, &y);
  for (int l = 0; l < 3; l++) {
    gr_tensor w;
    gr_tensor_alloc(&w, GR_F32, &(gr_shape){2, {sizes[l], sizes[l + 1]}}, &err);
    double lim = sqrt(6.0 / (double)(sizes[l] + sizes[l + 1]));
    for (int64_t i = 0; i < sizes[l] * sizes[l + 1]; i++)
      ((float *)gr_tensor_data(&w))[i] = (float)((2 * rnd() - 1) * lim);
    snprintf(path, sizeof path, "%s/w%d.npy", dir, l);
    write_npy(path, &w);
    gr_tensor_release(&w);
  }
  gr_tensor_release(&x);
  gr_tensor_release(&y);
}

/* Median seconds of the step's eight products as raw sgemm calls at batch b. */
static double sgemm_seconds(int b) {
  /* {m, n, k, transpose_a, transpose_b} */
  static const int prod[8][5] = {
      {0, 256, 784, 0, 0}, {0, 256, 256, 0, 0}, {0, 10, 256, 0, 0}, /* forward */
      {784, 256, 0, 1, 0}, {256, 256, 0, 1, 0}, {256, 10, 0, 1, 0}, /* weight gradients */
      {0, 256, 256, 0, 1}, {0, 256, 10, 0, 1}};                     /* input gradients */
  size_t most = (size_t)(b > 256 ? b : 256) * 784; /* elements of the largest operand */
  float *A = calloc(most, 4), *B = calloc(most, 4), *C = calloc(most, 4);
  if (!A || !B || !C) {
    fprintf(stderr, "bench_mlp: out of memory\n");
    exit(1);
  }
  double t[21];
  for (int r = 0; r < 21; r++) {
    double t0 = bench_now();
    for (int p = 0; p < 8; p++) {
      int m = prod[p][0] ? prod[p][0] : b, n = prod[p][1], k = prod[p][2] ? prod[p][2] : b;
      int ta = prod[p][3], tb = prod[p][4];
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
                  n, k, 1.0f, A, ta ? m : k, B, tb ? k : n, 0.0f, C, n);
    }
    t[r] = bench_now() - t0;
  }
  free(A);
  free(B);
  free(C);
  return bench_median(t + 1, 20);
}

/* PyTorch's median seconds per step, or -1 when it cannot run. */
static double torch_step(const char *script, const char *dir, int steps, double *first_loss) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 /usr/bin/python3 %s %s %d 2>&1", script, dir, steps);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[512];
  double ms = -1;
  while (fgets(line, sizeof line, p))
    if (sscanf(line, "first_loss=%lf ms_per_step=%lf", first_loss, &ms) != 2) fputs(line, stderr);
  pclose(p);
  return ms > 0 ? ms / 1e3 : -1;
}

int main(int argc, char **argv) {
  int smoke = bench_is_smoke(argc, argv), steps = smoke ? 3 : 200;
  char dir[] = "/tmp/gr_bench_mlp_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char script[1024];
  snprintf(script, sizeof script, "%s/mlp_torch.py", GR_BENCH_DIR);
  int batches[2] = {32, 128};
  double ratio[2] = {0, 0}, floor[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    write_data(dir, batches[k]);
    double gl = 0, tl = 0;
    double tg = graphrun_step(dir, batches[k], steps, &gl);
    double tt = smoke ? -1 : torch_step(script, dir, steps, &tl);
    if (tt <= 0) {
      printf("batch %3d: graphrun %.3f ms/step (PyTorch not measured%s)\n", batches[k], tg * 1e3,
             smoke ? ": smoke run" : ": install python3-torch");
      continue;
    }
    double ts = sgemm_seconds(batches[k]);
    ratio[k] = tg / tt;
    floor[k] = ts / tt;
    printf("batch %3d: graphrun %.3f ms/step, PyTorch %.3f ms/step, ratio %.2f (first-step loss "
           "%.5f vs %.5f); its 8 products as raw sgemm %.3f ms, floor %.2f\n",
           batches[k], tg * 1e3, tt * 1e3, ratio[k], gl, tl, ts * 1e3, floor[k]);
  }
  /* effective GFLOP/s of the train step at batch 512 vs raw sgemm */
  int b = smoke ? 64 : 512;
  write_data(dir, b);
  double gl;
  double ts = graphrun_step(dir, b, smoke ? 2 : 30, &gl);
  double flops = 0;
  for (int l = 0; l < 3; l++) flops += 3 * 2.0 * b * (double)sizes[l] * (double)sizes[l + 1];
  float *A = calloc((size_t)b * 784, 4), *B = calloc(784 * 256, 4), *C = calloc((size_t)b * 256, 4);
  double tr[20];
  for (int i = 0; i < 20; i++) {
    double t0 = bench_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, 256, 784, 1.0f, A, 784, B, 256, 0.0f,
                C, 256);
    tr[i] = bench_now() - t0;
  }
  double raw = 2.0 * b * 784 * 256 / bench_median(tr, 20) / 1e9;
  printf("batch %d train step: %.1f effective GFLOP/s; raw cblas_sgemm %dx784x256: %.1f GFLOP/s "
         "(%.0f%%)\n",
         b, flops / ts / 1e9, b, raw, 100.0 * flops / ts / 1e9 / raw);
  free(A);
  free(B);
  free(C);
  bench_remove_tree("bench_mlp", dir);
  printf("mlp: ratio_b32=%.2f ratio_b128=%.2f floor_b32=%.2f floor_b128=%.2f\n", ratio[0], ratio[1],
         floor[0], floor[1]);
  return 0;
}
