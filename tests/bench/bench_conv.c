/* Convolution benchmarks:
 *
 * 1. conv2d forward, 3x3, 64 -> 64 channels, 28x28, SAME, batch 64, as
 *    GFLOP/s next to raw cblas_sgemm on the same product (m = 64 * 28 * 28,
 *    n = 64, k = 576): the gap is im2col and the engine.
 * 2. One training step (forward, backward, Adam update) of the CNN of
 *    examples/fashion_cnn.gr (conv 3x3 1->32, batch norm, ReLU, max pool;
 *    conv 3x3 32->64, batch norm, ReLU, max pool; dropout 0.3; dense
 *    3136->128 ReLU; dense 128->10) at batch 64 on random data, in
 *    graphrun and in PyTorch 1.13 (tests/bench/conv_torch.py, Debian
 *    python3-torch, oneDNN inside), at 1 thread each and at 2 (graphrun:
 *    inter-op threads, which split the large kernels over the batch;
 *    PyTorch: torch.set_num_threads), the four in interleaved slices of 5
 *    steps (PyTorch serving them from child processes), each figure the
 *    median over 9 slices of the time per step; and the step's matrix
 *    products alone as raw sgemm (the im2col products of both convs and
 *    the dense layers, forward and both gradients): no engine doing
 *    convolution as im2col on this BLAS trains faster than that.
 * 3. Where graphrun's one-thread step goes, per op (median of traced
 *    steps), against each op's floor: the bytes its nodes read and write
 *    at the memory bandwidth measured here (a 32 MiB copy), or for the
 *    products (conv2d and its gradients, matmul) their flops at the raw
 *    sgemm speed of the step's products, whichever is larger. The
 *    sessions fuse (gr_init: batch norm + relu, ...); the step is also
 *    timed unfused (no_fusion), in the same interleaved slices.
 * 4. The same table for a separable convolution (Keras' SeparableConv2D:
 *    a depthwise 3x3 conv, then a pointwise 1x1 conv, 64 -> 128 channels,
 *    28x28, batch 64), forward and both gradients of each.
 *
 * Before it: separable: x_floor=X ops_near_floor=K/N; fusion: unfused/fused=U
 *   X: the separable conv's time over its floor; U: the one-thread step
 *   unfused over fused.
 * Last line: conv: ratio_step=R ratio_best=B floor=F gflops_conv=G gflops_sgemm=S
 *                  ops_near_floor=K/N
 *   R: graphrun step / PyTorch step, 1 thread each; B: the same at each
 *   engine's best thread count (1 or 2); F: raw sgemm time / PyTorch step;
 *   K of the N ops of the table within 1.5x of their floor. */
#include <cblas.h>
#include <graphrun.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench_util.h"

static uint64_t lcg = 99;
static float rnd(void) {
  lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(lcg >> 11) / 9007199254740992.0);
}

static gr_tensor random_tensor(gr_shape s, float scale) {
  gr_tensor t;
  gr_error err;
  gr_tensor_alloc(&t, GR_F32, &s, &err);
  for (int64_t i = 0; i < gr_tensor_num_elements(&t); i++)
    ((float *)gr_tensor_data(&t))[i] = scale * (2 * rnd() - 1);
  return t;
}

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench_conv: %s: %s\n", what, msg);
  exit(1);
}

/* Median seconds of running fetch (and target) `reps` times. */
static double time_runs(gr_session *s, const gr_feed *f, int nf, gr_output fetch, gr_output *target,
                        int reps) {
  double *t = malloc(sizeof(double) * (size_t)reps);
  gr_error err;
  for (int i = -2; i < reps; i++) {
    gr_tensor out;
    double t0 = bench_now();
    if (gr_session_run(s, f, nf, &fetch, 1, &out, target, target ? 1 : 0, &err) != GR_OK)
      die("run", err.msg);
    double dt = bench_now() - t0;
    gr_tensor_release(&out);
    if (i >= 0) t[i] = dt;
  }
  double m = bench_median(t, reps);
  free(t);
  return m;
}

/* Median seconds of one raw sgemm C[m, n] = op(A) op(B). */
static double sgemm_time(int m, int n, int k, bool ta, bool tb, int reps) {
  float *A = calloc((size_t)m * k, 4), *B = calloc((size_t)k * n, 4), *C = calloc((size_t)m * n, 4);
  double t[64];
  if (reps > 64) reps = 64;
  for (int r = -1; r < reps; r++) {
    double t0 = bench_now();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, 1.0f, A, ta ? m : k, B, tb ? k : n, 0.0f, C, n);
    if (r >= 0) t[r] = bench_now() - t0;
  }
  free(A), free(B), free(C);
  return bench_median(t, reps);
}

/* ---- 1. conv2d forward ------------------------------------------------------------------ */

static void conv_forward(int smoke, double *gf_conv, double *gf_sgemm) {
  int b = smoke ? 2 : 64;
  gr_graph *g = gr_graph_new();
  gr_tensor xv = random_tensor((gr_shape){4, {b, 28, 28, 64}}, 1);
  gr_tensor fv = random_tensor((gr_shape){4, {3, 3, 64, 64}}, 0.1f);
  gr_output x = gr_placeholder(g, "x", GR_F32, xv.shape);
  gr_output y = gr_conv2d(g, x, gr_const(g, &fv), &(gr_conv_options){.padding = "SAME"});
  /* fetch a scalar so the output copy is not timed */
  gr_output s = gr_reduce_sum(
      g, gr_slice(g, y, (int64_t[]){0, 0, 0, 0}, (int64_t[]){1, 1, 1, 1}, 4), NULL, 0, false);
  gr_error err;
  gr_session *sess = gr_session_new(g, &(gr_session_options){.inter_op_threads = 1}, &err);
  if (!sess) die("session", err.msg);
  gr_feed f = {x, &xv};
  double t = time_runs(sess, &f, 1, s, NULL, smoke ? 2 : 15);
  double flops = 2.0 * b * 28 * 28 * 64 * 576;
  double ts = sgemm_time(b * 28 * 28, 64, 576, false, false, smoke ? 2 : 15);
  *gf_conv = flops / t / 1e9;
  *gf_sgemm = flops / ts / 1e9;
  printf("conv2d 3x3 64->64 28x28 SAME batch %d: %.2f ms, %.1f GFLOP/s; raw sgemm %dx64x576 "
         "%.2f ms, %.1f GFLOP/s (%.0f%%)\n",
         b, t * 1e3, *gf_conv, b * 784, ts * 1e3, *gf_sgemm, 100 * *gf_conv / *gf_sgemm);
  gr_session_free(sess);
  gr_graph_free(g);
  gr_tensor_release(&xv), gr_tensor_release(&fv);
}

/* ---- 2. the example's training step ------------------------------------------------------------
 */

static gr_output block(gr_graph *g, gr_output x, int cin, int cout, int seed) {
  char nm[16];
  gr_shape cs = {1, {cout}};
  snprintf(nm, sizeof nm, "w%d", seed);
  gr_output w =
      gr_variable(g, nm, gr_glorot_uniform(g, GR_F32, (gr_shape){4, {3, 3, cin, cout}}, seed));
  snprintf(nm, sizeof nm, "gamma%d", seed);
  gr_output gm = gr_variable(g, nm, gr_ones(g, GR_F32, cs));
  snprintf(nm, sizeof nm, "beta%d", seed);
  gr_output bt = gr_variable(g, nm, gr_zeros(g, GR_F32, cs));
  snprintf(nm, sizeof nm, "mean%d", seed);
  gr_output mm = gr_variable(g, nm, gr_zeros(g, GR_F32, cs));
  snprintf(nm, sizeof nm, "var%d", seed);
  gr_output mv = gr_variable(g, nm, gr_ones(g, GR_F32, cs));
  gr_output c = gr_conv2d(g, x, w, &(gr_conv_options){.padding = "SAME"});
  gr_output y = gr_relu(g, gr_batch_norm(g, c, gm, bt, mm, mv, true, 0.99, 1e-3, NULL));
  return gr_max_pool(g, y, (int64_t[]){2, 2}, NULL, "SAME", NULL);
}

static gr_output dense(gr_graph *g, gr_output x, int nin, int nout, int seed) {
  char nm[16];
  snprintf(nm, sizeof nm, "dw%d", seed);
  gr_output w = gr_variable(g, nm, gr_glorot_uniform(g, GR_F32, (gr_shape){2, {nin, nout}}, seed));
  snprintf(nm, sizeof nm, "db%d", seed);
  gr_output b = gr_variable(g, nm, gr_zeros(g, GR_F32, (gr_shape){1, {nout}}));
  return gr_bias_add(g, gr_matmul(g, x, w, false, false), b);
}

/* ---- 3. per-op table ------------------------------------------------------------------------ */

/* Bytes per second of copying a 32 MiB buffer (read + write counted), the
 * best of 9 copies. */
static double mem_bandwidth(int smoke) {
  size_t n = (smoke ? 1u : 32u) << 20;
  char *a = malloc(n), *b = malloc(n);
  memset(a, 1, n), memset(b, 2, n);
  double t[9];
  for (int r = 0; r < 9; r++) {
    double t0 = bench_now();
    memcpy(r % 2 ? a : b, r % 2 ? b : a, n);
    t[r] = bench_now() - t0;
  }
  free(a), free(b);
  double best = t[0];
  for (int r = 1; r < 9; r++) best = t[r] < best ? t[r] : best;
  return 2.0 * (double)n / best;
}

static double shape_bytes(const gr_shape *s, gr_dtype dt) {
  double e = 1;
  for (int i = 0; i < s->rank; i++) e *= s->dims[i] < 0 ? 1 : (double)s->dims[i];
  return e * (double)gr_dtype_size(dt);
}

/* Bytes a node reads (its inputs) and writes (its outputs); an update of
 * variables (attrs var, slot_*: an optimizer's) reads and writes each (as
 * large as the node of its name, else as its largest input). */
static double node_bytes(const gr_node *n) {
  double b = 0, most = 0;
  for (int i = 0; i < n->num_inputs; i++) {
    const gr_node *p = n->inputs[i].node;
    double e = shape_bytes(&p->out_shapes[n->inputs[i].index], p->out_dtypes[n->inputs[i].index]);
    b += e;
    most = e > most ? e : most;
  }
  for (int i = 0; i < n->num_attrs; i++) {
    if (!gr_attr_names_variable(&n->attrs[i])) continue;
    const gr_node *v = gr_graph_find_node(n->graph, n->attrs[i].value.s);
    b += 2 * (v && v->num_outputs ? shape_bytes(&v->out_shapes[0], v->out_dtypes[0]) : most);
  }
  for (int i = 0; i < n->num_outputs; i++) b += shape_bytes(&n->out_shapes[i], n->out_dtypes[i]);
  return b;
}

static bool is_product(const char *op) {
  return strncmp(op, "conv2d", 6) == 0 || strncmp(op, "matmul", 6) == 0 ||
         strncmp(op, "depthwise", 9) == 0;
}

enum { MAX_OPS = 64 };
typedef struct op_row {
  char op[48];
  int calls;
  double ms, floor_ms;
} op_row;

/* A row's name: the op's, and for a convolution whether it is depthwise
 * (groups > 1) or pointwise (1x1 filter). */
static void row_name(const gr_node *n, char *out, size_t cap) {
  const char *kind = "";
  if (strstr(n->op->name, "conv2d")) {
    int fi = strcmp(n->op->name, "conv2d_backprop_filter") == 0 ? 2 : 1;
    const gr_shape *f = &n->inputs[fi].node->out_shapes[n->inputs[fi].index];
    if (gr_node_attr_int(n, "groups", 1) > 1)
      kind = " depthwise";
    else if (f->rank == 4 && f->dims[0] == 1 && f->dims[1] == 1)
      kind = " pointwise";
  }
  snprintf(out, cap, "%s%s", n->op->name, kind);
}

/* Sums the median node times of `reps` traced steps (feeds f[0..nf),
 * fetch, target) by row_name; floors from bandwidth bw (bytes/s) and the
 * sgemm rate (flop/s), only the convolutions' when convs_only. Prints the
 * table; returns the number of rows within 1.5x of their floor (*total:
 * rows; *sum_ms, *sum_floor: their sums, when not NULL). */
static int op_table(gr_session *s, const gr_feed *f, int nf, gr_output fetch, gr_output target,
                    int reps, double bw, double rate, bool convs_only, int *total, double *sum_ms,
                    double *sum_floor) {
  gr_step_trace *tr = gr_step_trace_new();
  gr_error err;
  int nn = 0, cap = 0;
  const gr_node **nodes = NULL;
  double *times = NULL; /* [node][rep] */
  for (int r = 0; r < reps; r++) {
    gr_tensor out;
    gr_step_trace_clear(tr);
    if (gr_session_run_traced(s, f, nf, &fetch, 1, &out, &target, 1, tr, &err) != GR_OK)
      die("traced run", err.msg);
    gr_tensor_release(&out);
    for (int i = 0; i < gr_step_trace_count(tr); i++) {
      const gr_trace_event *e = gr_step_trace_event(tr, i);
      int k = 0;
      while (k < nn && nodes[k] != e->node) k++;
      if (k == nn) {
        if (r > 0) continue; /* ran only in a later step */
        if (nn == cap) {
          cap = cap ? 2 * cap : 256;
          nodes = realloc(nodes, sizeof *nodes * (size_t)cap);
          times = realloc(times, sizeof *times * (size_t)cap * (size_t)reps);
        }
        nodes[nn] = e->node;
        for (int q = 0; q < reps; q++) times[(size_t)nn * (size_t)reps + (size_t)q] = 0;
        nn++;
      }
      times[(size_t)k * (size_t)reps + (size_t)r] += (double)(e->end_ns - e->start_ns) * 1e-6;
    }
  }
  op_row rows[MAX_OPS];
  int nr = 0;
  double all = 0;
  for (int k = 0; k < nn; k++) {
    const gr_node *n = nodes[k];
    if (convs_only && !strstr(n->op->name, "conv2d")) continue;
    double ms = bench_median(times + (size_t)k * (size_t)reps, reps);
    gr_cost c = {0, 0};
    if (is_product(n->op->name) && n->op->cost_fn) n->op->cost_fn(n, &c);
    double fl = node_bytes(n) / bw * 1e3, fc = c.flops / rate * 1e3;
    char name[48];
    row_name(n, name, sizeof name);
    int j = 0;
    while (j < nr && strcmp(rows[j].op, name) != 0) j++;
    if (j == nr) {
      if (nr == MAX_OPS) continue;
      rows[nr] = (op_row){"", 0, 0, 0};
      snprintf(rows[nr++].op, sizeof rows[0].op, "%s", name);
    }
    rows[j].calls++;
    rows[j].ms += ms;
    rows[j].floor_ms += fl > fc ? fl : fc;
    all += ms;
  }
  /* largest first */
  for (int i = 0; i < nr; i++)
    for (int j = i + 1; j < nr; j++)
      if (rows[j].ms > rows[i].ms) {
        op_row t = rows[i];
        rows[i] = rows[j], rows[j] = t;
      }
  int near = 0, shown = 0;
  double shown_ms = 0, shown_floor = 0;
  printf("per op, one thread (median of %d traced steps; floor: bytes at %.1f GB/s, products' "
         "flops at %.1f GFLOP/s):\n",
         reps, bw / 1e9, rate / 1e9);
  printf("  %-34s %5s %9s %9s %6s\n", "op", "calls", "ms", "floor ms", "x");
  for (int i = 0; i < nr; i++) {
    if (rows[i].ms < 0.05) continue; /* the optimizer's and the loss's scalars */
    double x = rows[i].floor_ms > 0 ? rows[i].ms / rows[i].floor_ms : 0;
    shown++;
    near += x <= 1.5;
    shown_ms += rows[i].ms, shown_floor += rows[i].floor_ms;
    printf("  %-34s %5d %9.3f %9.3f %6.2f%s\n", rows[i].op, rows[i].calls, rows[i].ms,
           rows[i].floor_ms, x, x <= 1.5 ? "" : "  (over 1.5x)");
  }
  printf("  all ops: %.2f ms\n", all);
  free(nodes), free(times);
  gr_step_trace_free(tr);
  *total = shown;
  if (sum_ms) *sum_ms = shown_ms;
  if (sum_floor) *sum_floor = shown_floor;
  return near;
}

/* The example's CNN in a session of `threads` inter-op threads (fused,
 * unless `plain`). */
typedef struct cnn {
  gr_graph *g;
  gr_session *s;
  gr_tensor xv, yv;
  gr_feed f[2];
  gr_output loss, train;
} cnn;

static void cnn_make(cnn *c, int b, int threads, bool plain) {
  gr_error err;
  c->g = gr_graph_new();
  gr_graph *g = c->g;
  c->xv = random_tensor((gr_shape){4, {b, 28, 28, 1}}, 1);
  gr_tensor_alloc(&c->yv, GR_I64, &(gr_shape){1, {b}}, &err);
  for (int i = 0; i < b; i++) ((int64_t *)gr_tensor_data(&c->yv))[i] = (int64_t)(rnd() * 10) % 10;
  gr_output x = gr_placeholder(g, "x", GR_F32, c->xv.shape);
  gr_output y = gr_placeholder(g, "y", GR_I64, c->yv.shape);
  gr_output h = block(g, block(g, x, 1, 32, 1), 32, 64, 2);
  h = gr_dropout(g, gr_flatten(g, h), 0.3, 5, true);
  h = dense(g, gr_relu(g, dense(g, h, 3136, 128, 3)), 128, 10, 4);
  c->loss = gr_reduce_mean(g, gr_sparse_softmax_cross_entropy(g, h, y), NULL, 0, false);
  gr_optimizer adam = {.kind = GR_OPT_ADAM, .learning_rate = 1e-3};
  c->train = gr_minimize(g, &adam, c->loss, NULL, 0);
  if (gr_graph_error(g)) die("build", gr_graph_error(g)->msg);
  c->s = gr_session_new(
      g,
      &(gr_session_options){.inter_op_threads = threads, .intra_op_threads = 1, .no_fusion = plain},
      &err);
  if (!c->s) die("session", err.msg);
  c->f[0] = (gr_feed){x, &c->xv}, c->f[1] = (gr_feed){y, &c->yv};
}

/* Seconds of n steps. */
static double cnn_run(cnn *c, int n) {
  gr_error err;
  double t0 = bench_now();
  for (int i = 0; i < n; i++) {
    gr_tensor out;
    if (gr_session_run(c->s, c->f, 2, &c->loss, 1, &out, &c->train, 1, &err) != GR_OK)
      die("run", err.msg);
    gr_tensor_release(&out);
  }
  return bench_now() - t0;
}

static void cnn_free(cnn *c) {
  gr_session_free(c->s);
  gr_graph_free(c->g);
  gr_tensor_release(&c->xv), gr_tensor_release(&c->yv);
}

/* The step's products as raw sgemm: per layer {m, n, k} of the forward
 * product; backward: the weight gradient (k x n over m) and, except for
 * the first layer, the input gradient (m x k over n). *flops: theirs. */
static double floor_seconds(int b, int reps, double *flops) {
  const int prod[4][3] = {{b * 784, 32, 9}, {b * 196, 64, 288}, {b, 128, 3136}, {b, 10, 128}};
  double t = 0;
  *flops = 0;
  for (int l = 0; l < 4; l++) {
    int m = prod[l][0], n = prod[l][1], k = prod[l][2];
    t += sgemm_time(m, n, k, false, false, reps);
    t += sgemm_time(k, n, m, true, false, reps);
    *flops += 2 * 2.0 * m * n * k;
    if (l > 0) t += sgemm_time(m, k, n, false, true, reps), *flops += 2.0 * m * n * k;
  }
  return t;
}

/* ---- 4. depthwise and separable convolutions -------------------------------------------- */

/* Keras' SeparableConv2D(128, 3, padding="same") on 64 channels of 28x28
 * at batch b (a MobileNet block's shape): the depthwise 3x3 conv and the
 * pointwise 1x1 conv, forward and both gradients of each, one thread; the
 * per-op table against the floors. *x: the table's time over its floor. */
static int separable(int smoke, int b, double bw, double rate, int *total, double *x) {
  gr_graph *g = gr_graph_new();
  gr_tensor xv = random_tensor((gr_shape){4, {b, 28, 28, 64}}, 1);
  gr_tensor dv = random_tensor((gr_shape){4, {3, 3, 1, 64}}, 0.3f);
  gr_tensor pv = random_tensor((gr_shape){4, {1, 1, 64, 128}}, 0.1f);
  gr_tensor rv = random_tensor((gr_shape){4, {b, 28, 28, 128}}, 1);
  gr_output in[3] = {gr_placeholder(g, "x", GR_F32, xv.shape),
                     gr_placeholder(g, "depthwise", GR_F32, dv.shape),
                     gr_placeholder(g, "pointwise", GR_F32, pv.shape)};
  gr_conv_options dw = {.padding = "SAME", .groups = 64};
  gr_output y = gr_conv2d(g, gr_conv2d(g, in[0], in[1], &dw), in[2], NULL);
  gr_output loss = gr_reduce_sum(g, gr_mul(g, y, gr_const(g, &rv)), NULL, 0, false);
  gr_output d[3];
  gr_gradients(g, &loss, 1, in, 3, NULL, false, d);
  gr_graph_push_control_deps(g, d, 3);
  gr_output all = gr_no_op(g, "gradients_done");
  gr_graph_pop_control_deps(g);
  if (gr_graph_error(g)) die("build", gr_graph_error(g)->msg);
  gr_error err;
  gr_session *s =
      gr_session_new(g, &(gr_session_options){.inter_op_threads = 1, .intra_op_threads = 1}, &err);
  if (!s) die("session", err.msg);
  gr_feed f[3] = {{in[0], &xv}, {in[1], &dv}, {in[2], &pv}};
  printf("separable conv 64->128 3x3 28x28 batch %d (depthwise, pointwise; forward and "
         "gradients):\n",
         b);
  double ms, fl;
  int near = op_table(s, f, 3, loss, all, smoke ? 2 : 20, bw, rate, true, total, &ms, &fl);
  *x = fl > 0 ? ms / fl : NAN;
  gr_session_free(s);
  gr_graph_free(g);
  gr_tensor_release(&xv), gr_tensor_release(&dv), gr_tensor_release(&pv), gr_tensor_release(&rv);
  return near;
}

/* PyTorch's side serving slices of steps (conv_torch.py ... serve). */
static bool torch_start(bench_server *c, int b, int threads) {
  char py[] = "/usr/bin/python3", script[600], bs[16], th[16], steps[] = "0", serve[] = "serve";
  snprintf(script, sizeof script, "%s/conv_torch.py", GR_BENCH_DIR);
  snprintf(bs, sizeof bs, "%d", b);
  snprintf(th, sizeof th, "%d", threads);
  char *argv[] = {py, script, bs, steps, th, serve, NULL};
  return bench_serve_start(c, argv, threads);
}

static void echo_line(const char *text, void *arg) {
  (void)arg;
  fputs(text, stderr);
}

static double min2(double a, double b) {
  return a > 0 && (b <= 0 || a < b) ? a : b;
}

int main(int argc, char **argv) {
  int smoke = bench_is_smoke(argc, argv);
  bench_start("bench_conv", NULL);
  gr_init(); /* the sessions fuse (conv2d epilogues, batch norm + relu, ...) */
  double gc, gs;
  conv_forward(smoke, &gc, &gs);
  int b = smoke ? 4 : 64, near = 0, total = 0;
  double flops, tf = floor_seconds(b, smoke ? 2 : 10, &flops);
  double bw = mem_bandwidth(smoke);
  cnn c1, c2, cu;
  cnn_make(&c1, b, 1, false);
  cnn_make(&c2, b, 2, false);
  cnn_make(&cu, b, 1, true);
  cnn_run(&c1, 2), cnn_run(&c2, 2), cnn_run(&cu, 2); /* warm up */
  near = op_table(c1.s, c1.f, 2, c1.loss, c1.train, smoke ? 2 : 20, bw, flops / tf, false, &total,
                  NULL, NULL);
  int sep_total = 0;
  double sep_x;
  int sep_near = separable(smoke, smoke ? 2 : 64, bw, flops / tf, &sep_total, &sep_x);
  /* graphrun and PyTorch at 1 and 2 threads, a slice of steps each in
   * turn, so that a change of the machine's speed hits all four; each
   * figure is the median over the slices of the time per step */
  enum { ROUNDS = 9, SLICE = 5 };
  int rounds = smoke ? 1 : ROUNDS, slice = smoke ? 1 : SLICE;
  bench_server t1 = {-1, NULL, NULL}, t2 = {-1, NULL, NULL};
  bool torch = !smoke && torch_start(&t1, b, 1) && torch_start(&t2, b, 2);
  double g1[ROUNDS], g2[ROUNDS], p1[ROUNDS], p2[ROUNDS], gu[ROUNDS];
  for (int r = 0; r < rounds; r++) {
    gu[r] = cnn_run(&cu, slice) / slice;
    g1[r] = cnn_run(&c1, slice) / slice;
    p1[r] = torch ? bench_serve_run(&t1, slice) / slice : -1;
    g2[r] = cnn_run(&c2, slice) / slice;
    p2[r] = torch ? bench_serve_run(&t2, slice) / slice : -1;
    torch = torch && p1[r] > 0 && p2[r] > 0;
  }
  if (!smoke) {
    torch = bench_serve_finish(&t1, echo_line, NULL) && torch;
    torch = bench_serve_finish(&t2, echo_line, NULL) && torch;
  }
  double tg = bench_median(g1, rounds), tg2 = bench_median(g2, rounds);
  double tu = bench_median(gu, rounds);
  double tt = torch ? bench_median(p1, rounds) : -1, tt2 = torch ? bench_median(p2, rounds) : -1;
  cnn_free(&c1), cnn_free(&c2), cnn_free(&cu);
  printf("CNN train step batch %d (median of %d interleaved slices of %d steps): graphrun %.2f ms "
         "(2 threads %.2f; unfused, 1 thread %.2f); its products as raw sgemm %.2f ms",
         b, rounds, slice, tg * 1e3, tg2 * 1e3, tu * 1e3, tf * 1e3);
  if (tt > 0)
    printf("; PyTorch %.2f ms (2 threads %.2f)\n", tt * 1e3, tt2 * 1e3);
  else
    printf("; PyTorch not measured (%s)\n", smoke ? "smoke run" : "install python3-torch");
  printf("separable: x_floor=%.2f ops_near_floor=%d/%d; fusion: unfused/fused=%.2f\n", sep_x,
         sep_near, sep_total, tg > 0 ? tu / tg : NAN);
  double best = min2(tt, tt2);
  printf("conv: ratio_step=%.2f ratio_best=%.2f floor=%.2f gflops_conv=%.1f gflops_sgemm=%.1f "
         "ops_near_floor=%d/%d\n",
         tt > 0 ? tg / tt : NAN, best > 0 ? min2(tg, tg2) / best : NAN, tt > 0 ? tf / tt : NAN, gc,
         gs, near, total);
  return 0;
}
