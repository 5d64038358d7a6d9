/* make bench-parallel: per-step throughput (examples/s) of the MLP
 * 784-256-256-10, SGD, batches of 128 per worker, trained in one process:
 *   one       one worker (the anchor, measured in the same run);
 *   sync      two workers with sync_replicas (between-graph: a session and
 *             a graph each, one shared container for the ps, the chief's
 *             update in a thread), stepped round by round;
 *   allreduce two in-graph replicas with mirrored variables and the ring
 *             all-reduce, on two devices of one session.
 * Ratios against `one`; the machine has two shared cores, so two workers
 * can at best double it. Last line: parallel: key=value ... */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "graphrun.h"

#define BATCH 128

typedef struct model {
  gr_output x, y, w1, b1, w2, b2, w3, b3;
} model;

static void model_vars(gr_graph *g, model *m) {
  m->w1 = gr_variable(g, "w1",
                      gr_glorot_uniform(g, GR_F32, gr_shape_make(2, (int64_t[]){784, 256}), 1));
  m->b1 = gr_variable(g, "b1", gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){256})));
  m->w2 = gr_variable(g, "w2",
                      gr_glorot_uniform(g, GR_F32, gr_shape_make(2, (int64_t[]){256, 256}), 2));
  m->b2 = gr_variable(g, "b2", gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){256})));
  m->w3 =
      gr_variable(g, "w3", gr_glorot_uniform(g, GR_F32, gr_shape_make(2, (int64_t[]){256, 10}), 3));
  m->b3 = gr_variable(g, "b3", gr_zeros(g, GR_F32, gr_shape_make(1, (int64_t[]){10})));
}

static gr_output loss_of(gr_graph *g, const model *m, gr_output x, gr_output y) {
  gr_output h = gr_relu(g, gr_add(g, gr_matmul(g, x, m->w1, false, false), m->b1));
  h = gr_relu(g, gr_add(g, gr_matmul(g, h, m->w2, false, false), m->b2));
  gr_output logits = gr_add(g, gr_matmul(g, h, m->w3, false, false), m->b3);
  return gr_reduce_mean(g, gr_sparse_softmax_cross_entropy(g, logits, y), NULL, 0, false);
}

static gr_status replica_loss(gr_graph *g, void *arg, int replica, const gr_output *in,
                              gr_output *out) {
  (void)replica;
  out[0] = loss_of(g, arg, in[0], in[1]);
  return GR_OK;
}

static void placeholders(gr_graph *g, model *m) {
  m->x = gr_placeholder(g, "x", GR_F32, gr_shape_make(2, (int64_t[]){-1, 784}));
  m->y = gr_placeholder(g, "y", GR_I64, gr_shape_make(1, (int64_t[]){-1}));
}

static gr_tensor xs, ys; /* 2 * BATCH rows */

static void make_batch(void) {
  gr_error err;
  gr_tensor_alloc(&xs, GR_F32, &(gr_shape){2, {2 * BATCH, 784}}, &err);
  gr_tensor_alloc(&ys, GR_I64, &(gr_shape){1, {2 * BATCH}}, &err);
  float *x = gr_tensor_data(&xs);
  int64_t *y = gr_tensor_data(&ys);
  uint64_t r = 12345;
  for (int i = 0; i < 2 * BATCH * 784; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)(r >> 40) / 16777216.0f;
  }
  for (int i = 0; i < 2 * BATCH; i++) y[i] = i % 10;
}

/* rows [r0, r0 + n) of the batch, as views */
static void rows(int r0, int n, gr_tensor *x, gr_tensor *y) {
  gr_tensor_ref(x, &xs);
  gr_tensor_ref(y, &ys);
  x->shape.dims[0] = n, y->shape.dims[0] = n;
  x->offset += (size_t)r0 * 784 * sizeof(float);
  y->offset += (size_t)r0 * sizeof(int64_t);
}

static void die(const char *what, const gr_error *err) {
  fprintf(stderr, "bench_parallel: %s: %s\n", what, err->msg);
  exit(1);
}

static gr_status step(gr_session *s, const model *m, gr_output train, int r0, int n,
                      gr_error *err) {
  gr_tensor x, y;
  rows(r0, n, &x, &y);
  gr_feed f[2] = {{m->x, &x}, {m->y, &y}};
  gr_status st = gr_session_run(s, f, 2, NULL, 0, NULL, &train, 1, err);
  gr_tensor_release(&x), gr_tensor_release(&y);
  return st;
}

static gr_session *session(gr_graph *g, gr_resource_mgr *m, int ndev, const char *const *names) {
  gr_error err;
  gr_session_options o = {.inter_op_threads = 2,
                          .resources = m,
                          .step_timeout_ms = 60000,
                          .num_devices = ndev,
                          .device_names = names};
  gr_session *s = gr_session_new(g, &o, &err);
  if (!s) die("session", &err);
  return s;
}

/* ---- one worker ------------------------------------------------------------------------- */

static double run_one(int steps) {
  gr_graph *g = gr_graph_new();
  model m;
  placeholders(g, &m);
  model_vars(g, &m);
  gr_optimizer opt = {.kind = GR_OPT_SGD, .learning_rate = 0.1};
  gr_output train = gr_minimize(g, &opt, loss_of(g, &m, m.x, m.y), NULL, 0);
  gr_session *s = session(g, NULL, 0, NULL);
  gr_error err;
  if (step(s, &m, train, 0, BATCH, &err) != GR_OK) die("one", &err);
  double t0 = bench_now();
  for (int k = 0; k < steps; k++)
    if (step(s, &m, train, 0, BATCH, &err) != GR_OK) die("one", &err);
  double eps = steps * BATCH / (bench_now() - t0);
  gr_session_free(s);
  gr_graph_free(g);
  return eps;
}

/* ---- sync replicas ------------------------------------------------------------------------ */

typedef struct worker {
  gr_graph *g;
  model m;
  gr_sync_replicas sr;
  gr_session *s, *chief;
  int index;
  gr_status st;
  gr_error err;
} worker;

static void *worker_step(void *arg) {
  worker *w = arg;
  w->st = step(w->s, &w->m, w->sr.train, w->index * BATCH, BATCH, &w->err);
  return NULL;
}

static void *chief_step(void *arg) {
  worker *w = arg;
  w->st = gr_session_run(w->chief, NULL, 0, NULL, 0, NULL, &w->sr.chief_update, 1, &w->err);
  return NULL;
}

static void sync_round(worker *w, worker *chief) {
  pthread_t t[3];
  pthread_create(&t[0], NULL, worker_step, &w[0]);
  pthread_create(&t[1], NULL, worker_step, &w[1]);
  pthread_create(&t[2], NULL, chief_step, chief);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++)
    if (w[i].st != GR_OK) die("sync worker", &w[i].err);
  if (chief->st != GR_OK) die("sync chief", &chief->err);
}

static double run_sync(int steps) {
  gr_resource_mgr *ps = gr_resource_mgr_new();
  worker w[2] = {0}, chief;
  for (int i = 0; i < 2; i++) {
    w[i].g = gr_graph_new();
    w[i].index = i;
    placeholders(w[i].g, &w[i].m);
    model_vars(w[i].g, &w[i].m);
    gr_sync_replicas_options o = {.optimizer = {.kind = GR_OPT_SGD, .learning_rate = 0.1},
                                  .replicas_to_aggregate = 2,
                                  .worker_index = i};
    gr_output loss = loss_of(w[i].g, &w[i].m, w[i].m.x, w[i].m.y);
    if (gr_sync_replicas_minimize(w[i].g, &o, loss, NULL, 0, &w[i].sr) != GR_OK)
      die("sync_replicas", gr_graph_error(w[i].g));
    w[i].s = session(w[i].g, ps, 0, NULL);
  }
  chief = w[0];
  chief.chief = session(w[0].g, ps, 0, NULL);
  sync_round(w, &chief);
  double t0 = bench_now();
  for (int k = 0; k < steps; k++) sync_round(w, &chief);
  double eps = steps * 2 * BATCH / (bench_now() - t0);
  gr_session_free(chief.chief);
  for (int i = 0; i < 2; i++) {
    gr_session_free(w[i].s);
    gr_graph_free(w[i].g);
  }
  gr_resource_mgr_free(ps);
  return eps;
}

/* ---- in-graph replicas, ring all-reduce ------------------------------------------------------ */

static double run_allreduce(int steps) {
  static const char *const names[] = {"/job:worker/replica:0/task:0/device:CPU:0",
                                      "/job:worker/replica:0/task:1/device:CPU:0"};
  static const char *const specs[] = {"/job:worker/task:0", "/job:worker/task:1"};
  gr_graph *g = gr_graph_new();
  model m;
  placeholders(g, &m);
  gr_graph_push_device_scope(g, specs[0]);
  model_vars(g, &m);
  gr_graph_pop_device_scope(g);
  gr_replicate_options o = {.num_replicas = 2, .devices = specs, .mirror_variables = true};
  gr_output loss;
  gr_replicate(g, &o, (gr_output[]){m.x, m.y}, 2, replica_loss, &m, 1, &loss);
  gr_optimizer opt = {.kind = GR_OPT_SGD, .learning_rate = 0.1};
  gr_output train = gr_minimize(g, &opt, loss, NULL, 0);
  if (gr_graph_error(g)) die("allreduce graph", gr_graph_error(g));
  gr_session *s = session(g, NULL, 2, names);
  gr_error err;
  if (step(s, &m, train, 0, 2 * BATCH, &err) != GR_OK) die("allreduce", &err);
  double t0 = bench_now();
  for (int k = 0; k < steps; k++)
    if (step(s, &m, train, 0, 2 * BATCH, &err) != GR_OK) die("allreduce", &err);
  double eps = steps * 2 * BATCH / (bench_now() - t0);
  gr_session_free(s);
  gr_graph_free(g);
  return eps;
}

int main(int argc, char **argv) {
  int steps = bench_is_smoke(argc, argv) ? 2 : 60, reps = bench_is_smoke(argc, argv) ? 1 : 3;
  make_batch();
  double one[3], sync[3], ar[3];
  for (int r = 0; r < reps; r++) { /* interleaved: the machine's load hits all three alike */
    one[r] = run_one(steps);
    sync[r] = run_sync(steps);
    ar[r] = run_allreduce(steps);
    printf("run %d: one worker %.0f examples/s, sync_replicas x2 %.0f, all-reduce x2 %.0f\n", r,
           one[r], sync[r], ar[r]);
  }
  double o = bench_median(one, reps), s = bench_median(sync, reps), a = bench_median(ar, reps);
  printf("medians: one %.0f, sync %.0f (%.2fx), all-reduce %.0f (%.2fx) examples/s\n", o, s, s / o,
         a, a / o);
  printf("parallel: one_eps=%.0f sync_eps=%.0f allreduce_eps=%.0f sync_scaling=%.2f "
         "allreduce_scaling=%.2f\n",
         o, s, a, s / o, a / o);
  gr_tensor_release(&xs), gr_tensor_release(&ys);
  return 0;
}
