/* Multi-device steps in one process.
 *
 * sendrecv_ns: the cost of one in-process _send/_recv transfer. A chain of
 * 2*M small ops alternates between two devices (every hop crosses), timed
 * against the same chain on one device in the same run; the difference per
 * hop is the transfer cost (send, rendezvous, recv, waking the consumer).
 *
 * split_ratio: the MLP train step (784-256-256-10, ReLU, softmax
 * cross-entropy, SGD, batch 128) with layer 1 on device 0 and layers 2-3 on
 * device 1 (gradients and updates follow their forward ops), against the
 * same step on one device; one inter-op thread per device, one BLAS thread.
 * The MLP is a chain, so the split can only add cost: the ratio shows how
 * much.
 *
 * recv_peak_mib_asap / _alap: recv scheduling. Device 0 makes 8 tensors of
 * 0.5 MiB at the start of the step; device 1 runs 8 stages of matmuls and
 * adds tensor k to its state only in stage k. From a step trace: the most bytes device 1 holds
 * at once in received tensors not yet used up (from a receive's end to the
 * end of its last consumer), receives started with the step (asap) or
 * scheduled as late as possible (alap); recv_time_ratio is the step time
 * alap / asap.
 *
 * Last line: partition: sendrecv_ns=N split_ratio=R recv_peak_mib_asap=A
 * recv_peak_mib_alap=B recv_time_ratio=T */
#include <graphrun.h>
#include <stdio.h>
#include <string.h>

#include "bench_util.h"

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench_partition: %s: %s\n", what, msg);
  exit(1);
}

static void pin(gr_graph *g, int dev, int k) {
  char spec[32];
  snprintf(spec, sizeof spec, "/device:CPU:%d", dev ? k : 0);
  gr_graph_push_device_scope(g, spec);
}

/* Median seconds of one run of (fetch, target) over `reps` runs. */
static double time_steps(gr_graph *g, int devices, const gr_feed *f, int nf, gr_output fetch,
                         gr_output target, int reps) {
  gr_error err;
  gr_session_options o = {.inter_op_threads = 1, .intra_op_threads = 1, .num_devices = devices};
  gr_session *s = gr_session_new(g, &o, &err);
  if (!s) die("session", err.msg);
  double *t = malloc(sizeof(double) * (size_t)reps);
  for (int i = -3; i < reps; i++) {
    gr_tensor out;
    double t0 = bench_now();
    if (gr_session_run(s, f, nf, &fetch, 1, &out, target.node ? &target : NULL, target.node ? 1 : 0,
                       &err) != GR_OK)
      die("run", err.msg);
    double dt = bench_now() - t0;
    gr_tensor_release(&out);
    if (i >= 0) t[i] = dt;
  }
  double med = bench_median(t, reps);
  free(t);
  gr_session_free(s);
  return med;
}

/* The ping-pong chain: hops ops, op i on device i % 2 (or all on device 0). */
static double chain_seconds(int hops, int split, int reps) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){1, {16}});
  gr_output h = x;
  for (int i = 0; i < hops; i++) {
    pin(g, split, i % 2);
    h = gr_neg(g, h);
    gr_graph_pop_device_scope(g);
  }
  if (gr_graph_error(g)) die("graph", gr_graph_error(g)->msg);
  gr_tensor xv = gr_tensor_empty();
  gr_error err;
  gr_tensor_alloc(&xv, GR_F32, &(gr_shape){1, {16}}, &err);
  for (int i = 0; i < 16; i++) ((float *)gr_tensor_data(&xv))[i] = (float)i;
  gr_feed f = {x, &xv};
  double t = time_steps(g, split ? 2 : 1, &f, 1, h, (gr_output){NULL, 0}, reps);
  gr_tensor_release(&xv);
  gr_graph_free(g);
  return t;
}

static const int64_t sizes[4] = {784, 256, 256, 10};

static double mlp_seconds(int batch, int split, int reps, double *loss_out) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, 7);
  pin(g, split, 0);
  gr_output x = gr_random_uniform(g, GR_F32, (gr_shape){2, {batch, 784}}, 0, 1, 1);
  gr_output y =
      gr_cast(g, gr_random_uniform(g, GR_F32, (gr_shape){1, {batch}}, 0, 9.99, 2), GR_I64);
  gr_output h = x;
  for (int l = 0; l < 3; l++) {
    if (l == 1) {
      gr_graph_pop_device_scope(g);
      pin(g, split, 1);
    }
    char wn[8], bn[8];
    snprintf(wn, sizeof wn, "w%d", l);
    snprintf(bn, sizeof bn, "b%d", l);
    gr_output w = gr_variable(
        g, wn, gr_glorot_uniform(g, GR_F32, (gr_shape){2, {sizes[l], sizes[l + 1]}}, l));
    gr_output b = gr_variable(g, bn, gr_zeros(g, GR_F32, (gr_shape){1, {sizes[l + 1]}}));
    h = gr_bias_add(g, gr_matmul(g, h, w, false, false), b);
    if (l < 2) h = gr_relu(g, h);
  }
  gr_output loss = gr_reduce_mean(g, gr_sparse_softmax_cross_entropy(g, h, y), NULL, 0, false);
  gr_graph_pop_device_scope(g);
  gr_optimizer sgd = {.kind = GR_OPT_SGD, .learning_rate = 0.1};
  gr_output train = gr_minimize(g, &sgd, loss, NULL, 0);
  if (gr_graph_error(g)) die("graph", gr_graph_error(g)->msg);
  double t = time_steps(g, split ? 2 : 1, NULL, 0, loss, train, reps);
  /* the loss after the same number of steps: the split computes the same */
  gr_error err;
  gr_session_options o = {.inter_op_threads = 1, .num_devices = split ? 2 : 1};
  gr_session *s = gr_session_new(g, &o, &err);
  gr_tensor lv;
  for (int i = 0; i < 3; i++) {
    if (gr_session_run(s, NULL, 0, &loss, 1, &lv, &train, 1, &err) != GR_OK) die("run", err.msg);
    if (i < 2) gr_tensor_release(&lv);
  }
  *loss_out = gr_tensor_get_f64(&lv, 0);
  gr_tensor_release(&lv);
  gr_session_free(s);
  gr_graph_free(g);
  return t;
}

/* ---- recv scheduling ------------------------------------------------------- */

enum { STAGES = 8 };

static gr_graph *staged(int rows, gr_output *x, gr_output *y) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, 1);
  gr_graph_push_device_scope(g, "/device:CPU:0");
  *x = gr_placeholder(g, "x", GR_F32, (gr_shape){2, {rows, 256}});
  gr_output big[STAGES];
  for (int k = 0; k < STAGES; k++) big[k] = gr_mul(g, *x, gr_const_f32(g, 1.0f / (float)(k + 2)));
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope(g, "/device:CPU:1");
  gr_output w = gr_random_uniform(g, GR_F32, (gr_shape){2, {256, 256}}, -0.06, 0.06, 2);
  gr_output h = gr_random_uniform(g, GR_F32, (gr_shape){2, {rows, 256}}, -1, 1, 3);
  for (int k = 0; k < STAGES; k++) {
    for (int r = 0; r < 2; r++) h = gr_tanh(g, gr_matmul(g, h, w, false, false));
    h = gr_add(g, h, big[k]); /* big[k] is held from its arrival until here */
  }
  gr_graph_pop_device_scope(g);
  *y = h;
  if (gr_graph_error(g)) die("staged graph", gr_graph_error(g)->msg);
  return g;
}

typedef struct held {
  int64_t t, bytes;
} held;
static int cmp_held(const void *a, const void *b) {
  const held *x = a, *y = b;
  return x->t < y->t ? -1 : x->t > y->t ? 1 : (int)(x->bytes - y->bytes); /* frees first */
}

/* The most bytes of received tensors that device `dev` holds at once. */
static double peak_received(const gr_step_trace *tr, const char *dev) {
  int n = gr_step_trace_count(tr), m = 0;
  held *ev = malloc(sizeof(held) * (size_t)(2 * n + 1));
  for (int i = 0; i < n; i++) {
    const gr_trace_event *r = gr_step_trace_event(tr, i);
    if (strcmp(r->node->op->name, "_recv") != 0 || !r->node->assigned_device ||
        strcmp(r->node->assigned_device, dev) != 0 || !r->out_bytes)
      continue;
    int64_t last = r->end_ns;
    for (int j = 0; j < n; j++) {
      const gr_trace_event *c = gr_step_trace_event(tr, j);
      for (int k = 0; k < c->node->num_inputs; k++)
        if (c->node->inputs[k].node == r->node && c->end_ns > last) last = c->end_ns;
    }
    ev[m++] = (held){r->end_ns, r->out_bytes};
    ev[m++] = (held){last, -r->out_bytes};
  }
  qsort(ev, (size_t)m, sizeof *ev, cmp_held);
  int64_t cur = 0, peak = 0;
  for (int i = 0; i < m; i++) {
    cur += ev[i].bytes;
    if (cur > peak) peak = cur;
  }
  free(ev);
  return (double)peak / (1 << 20);
}

/* Median peak (MiB) and median step seconds over reps traced steps. */
static void recv_sched_run(int rows, bool sched, int reps, double *peak, double *secs) {
  gr_output x, y;
  gr_graph *g = staged(rows, &x, &y);
  gr_error err;
  gr_session_options o = {
      .inter_op_threads = 1, .intra_op_threads = 1, .num_devices = 2, .schedule_recvs = sched};
  gr_session *s = gr_session_new(g, &o, &err);
  if (!s) die("session", err.msg);
  gr_tensor xv;
  if (gr_tensor_alloc_zeros(&xv, GR_F32, &(gr_shape){2, {rows, 256}}, &err) != GR_OK)
    die("feed", err.msg);
  gr_feed f = {x, &xv};
  gr_step_trace *tr = gr_step_trace_new();
  double *p = malloc(sizeof(double) * (size_t)reps), *t = malloc(sizeof(double) * (size_t)reps);
  for (int i = -2; i < reps; i++) {
    gr_tensor out;
    gr_step_trace_clear(tr);
    double t0 = bench_now();
    if (gr_session_run_traced(s, &f, 1, &y, 1, &out, NULL, 0, tr, &err) != GR_OK)
      die("run", err.msg);
    double dt = bench_now() - t0;
    gr_tensor_release(&out);
    if (i < 0) continue;
    t[i] = dt;
    p[i] = peak_received(tr, "/job:localhost/replica:0/task:0/device:CPU:1");
  }
  *peak = bench_median(p, reps);
  *secs = bench_median(t, reps);
  free(p), free(t);
  gr_step_trace_free(tr);
  gr_tensor_release(&xv);
  gr_session_free(s);
  gr_graph_free(g);
}

int main(int argc, char **argv) {
  bool smoke = bench_is_smoke(argc, argv);
  int hops = smoke ? 50 : 2000, reps = smoke ? 3 : 31, batch = smoke ? 8 : 128;
  /* alternate the two configurations so that drift affects both alike */
  double one = 0, two = 0;
  int rounds = smoke ? 1 : 5;
  double t1[8], t2[8];
  for (int r = 0; r < rounds; r++) {
    t1[r] = chain_seconds(hops, 0, reps);
    t2[r] = chain_seconds(hops, 1, reps);
  }
  one = bench_median(t1, rounds);
  two = bench_median(t2, rounds);
  double ns = (two - one) / hops * 1e9;
  printf("chain of %d hops: one device %.3f ms, alternating two devices %.3f ms\n", hops, one * 1e3,
         two * 1e3);
  double loss1, loss2;
  double m1 = 0, m2 = 0;
  for (int r = 0; r < rounds; r++) {
    t1[r] = mlp_seconds(batch, 0, reps, &loss1);
    t2[r] = mlp_seconds(batch, 1, reps, &loss2);
  }
  m1 = bench_median(t1, rounds);
  m2 = bench_median(t2, rounds);
  printf("MLP step batch %d: one device %.3f ms, split over two %.3f ms (losses %.9g %.9g)\n",
         batch, m1 * 1e3, m2 * 1e3, loss1, loss2);
  if (loss1 != loss2) die("mlp", "the split step computes a different loss");
  int rows = smoke ? 32 : 512, sreps = smoke ? 3 : 7;
  double pa, pl, ta, tl, pas[8], pls[8], tas[8], tls[8];
  for (int r = 0; r < rounds; r++) { /* alternate, as above */
    recv_sched_run(rows, false, sreps, &pas[r], &tas[r]);
    recv_sched_run(rows, true, sreps, &pls[r], &tls[r]);
  }
  pa = bench_median(pas, rounds), pl = bench_median(pls, rounds);
  ta = bench_median(tas, rounds), tl = bench_median(tls, rounds);
  printf("recv scheduling, %d received tensors of %.2f MiB: device 1 holds at most %.2f MiB "
         "(receives at the start) / %.2f MiB (scheduled); step %.3f / %.3f ms\n",
         STAGES, rows * 256 * 4.0 / (1 << 20), pa, pl, ta * 1e3, tl * 1e3);
  printf("partition: sendrecv_ns=%.0f split_ratio=%.3f recv_peak_mib_asap=%.2f "
         "recv_peak_mib_alap=%.2f recv_time_ratio=%.3f\n",
         ns, m2 / m1, pa, pl, tl / ta);
  return 0;
}
