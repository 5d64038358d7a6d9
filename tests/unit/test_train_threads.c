/* What the training loop's use of several threads must not change
 * (docs/training.md, docs/internals.md):
 *   - a product large enough to be split over two threads gives the same
 *     bits with 1, 2 and 3 inter-op threads, and is a correct product
 *     (against a double-precision reference), transposed or not, in matmul
 *     and in the fused SGD update;
 *   - the batch that the batch op makes ahead on a pool thread is the batch
 *     it would make itself: byte for byte the same as a one-thread session
 *     for steps in order, repeated, jumping back and forth and across epochs;
 *   - a training loop whose products are split and whose batches are made
 *     ahead ends with the same weights, bit for bit, with 1 and 2 threads;
 *   - gr_kernel_parallel runs every chunk exactly once, with and without
 *     pool threads, and a task scheduled first runs before those queued. */
#include <graphrun.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core_engine.h"
#include "gr_test.h"
#include "test_util.h"

static bool same_bits(const gr_tensor *a, const gr_tensor *b) {
  return a->dtype == b->dtype && gr_shape_equal(&a->shape, &b->shape) &&
         memcmp(gr_tensor_data(a), gr_tensor_data(b), gr_tensor_num_bytes(a)) == 0;
}

/* max |C - A B| over C for row-major f32 matrices (op as stored in the tensors). */
static double product_error(const gr_tensor *c, const gr_tensor *a, const gr_tensor *b, bool ta,
                            bool tb) {
  int64_t m = c->shape.dims[0], n = c->shape.dims[1];
  int64_t k = a->shape.dims[ta ? 0 : 1], lda = a->shape.dims[1], ldb = b->shape.dims[1];
  const float *A = gr_tensor_data(a), *B = gr_tensor_data(b), *C = gr_tensor_data(c);
  double worst = 0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t p = 0; p < k; p++)
        s += (double)(ta ? A[p * lda + i] : A[i * lda + p]) *
             (double)(tb ? B[j * ldb + p] : B[p * ldb + j]);
      double e = fabs(s - (double)C[i * n + j]);
      if (e > worst) worst = e;
    }
  return worst;
}

/* Products above the split size (8 MFLOP), each transposition, and odd
 * sizes whose halves are not equal. */
static void test_split_products(void) {
  static const int64_t dims[][5] = {{128, 256, 784, 0, 0}, {784, 256, 128, 1, 0},
                                    {128, 256, 256, 0, 1}, {200, 333, 150, 1, 1},
                                    {129, 40, 1000, 0, 0}, {40, 1000, 129, 0, 0}};
  for (size_t c = 0; c < sizeof dims / sizeof dims[0]; c++) {
    int64_t m = dims[c][0], n = dims[c][1], k = dims[c][2];
    bool ta = dims[c][3], tb = dims[c][4];
    gt_rng r = {(uint64_t)(7 + c)};
    gr_tensor a = gt_random(&r, GR_F32, (gr_shape){2, {ta ? k : m, ta ? m : k}}, -1, 1);
    gr_tensor b = gt_random(&r, GR_F32, (gr_shape){2, {tb ? n : k, tb ? k : n}}, -1, 1);
    gr_tensor out[3];
    for (int t = 0; t < 3; t++) {
      gr_graph *g = gr_graph_new();
      gr_output y = gr_matmul(g, gr_const(g, &a), gr_const(g, &b), ta, tb);
      gr_error err;
      gr_session_options o = {.inter_op_threads = t + 1};
      gr_session *s = gr_session_new(g, &o, &err);
      GR_CHECK_OK(gr_session_run(s, NULL, 0, &y, 1, &out[t], NULL, 0, &err), err);
      gr_session_free(s);
      gr_graph_free(g);
    }
    double e = product_error(&out[0], &a, &b, ta, tb);
    GR_CHECK_MSG(e < 1e-4 * (double)k, "%lldx%lldx%lld: error %g", (long long)m, (long long)n,
                 (long long)k, e);
    for (int t = 1; t < 3; t++) {
      GR_CHECK_MSG(same_bits(&out[0], &out[t]),
                   "%lldx%lldx%lld ta=%d tb=%d: %d threads give other bits than 1", (long long)m,
                   (long long)n, (long long)k, ta, tb, t + 1);
      gr_tensor_release(&out[t]);
    }
    gr_tensor_release(&out[0]);
    gr_tensor_release(&a);
    gr_tensor_release(&b);
  }
}

/* The batch op's outputs for a sequence of steps, in a session of `threads`. */
static void batches(int threads, const int64_t *steps, int n, gr_tensor *out /* [n][2] */) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, 3);
  gt_rng r = {11};
  gr_tensor xs = gt_random(&r, GR_F32, (gr_shape){2, {1000, 33}}, -1, 1);
  gr_tensor ys = gt_random(&r, GR_I64, (gr_shape){1, {1000}}, 0, 9);
  gr_output data[2] = {gr_const(g, &xs), gr_const(g, &ys)};
  gr_tensor_release(&xs);
  gr_tensor_release(&ys);
  gr_output step = gr_placeholder(g, "step", GR_I64, gr_shape_scalar());
  gr_output b = gr_batch(g, step, data, 2, 64, 5, true, 1, 0);
  gr_error err;
  gr_session_options o = {.inter_op_threads = threads};
  gr_session *s = gr_session_new(g, &o, &err);
  for (int i = 0; i < n; i++) {
    gr_tensor sv = gr_tensor_scalar_i64(steps[i]);
    gr_feed f = {step, &sv};
    GR_CHECK_OK(gr_session_run(s, &f, 1, (gr_output[]){b, gr_output_at(b, 1)}, 2, &out[2 * i], NULL,
                               0, &err),
                err);
    gr_tensor_release(&sv);
    if (threads > 1) usleep(2000); /* time for the next batch to be made ahead */
  }
  gr_session_free(s);
  gr_graph_free(g);
}

static void test_prefetched_batches(void) {
  /* 15 batches an epoch: in order across epochs 0-2, repeated, back, forward */
  static const int64_t steps[] = {0,  1,  2, 3, 13, 14, 15, 16, 16, 16, 15, 29,
                                  30, 31, 2, 3, 4,  45, 46, 0,  1,  60, 61, 62};
  enum { N = sizeof steps / sizeof steps[0] };
  gr_tensor one[2 * N], two[2 * N];
  batches(1, steps, N, one);
  batches(2, steps, N, two);
  for (int i = 0; i < 2 * N; i++) {
    GR_CHECK_MSG(same_bits(&one[i], &two[i]), "step %lld output %d: the batch made ahead differs",
                 (long long)steps[i / 2], i % 2);
    gr_tensor_release(&one[i]);
    gr_tensor_release(&two[i]);
  }
  /* and the batches of different steps do differ (the comparison can fail) */
  gr_tensor a[4];
  batches(2, (const int64_t[]){4, 5}, 2, a);
  GR_CHECK(!same_bits(&a[0], &a[2]));
  for (int i = 0; i < 4; i++) gr_tensor_release(&a[i]);
}

/* An MLP on 2048 x 784 random data through batch and global_step, with
 * products of 25-51 MFLOP (split) and SGD fused with the weight gradients. */
static void train(int threads, int steps, gr_tensor w[3]) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, 9);
  gt_rng r = {5};
  gr_tensor xs = gt_random(&r, GR_F32, (gr_shape){2, {2048, 784}}, 0, 1);
  gr_tensor ys = gt_random(&r, GR_I64, (gr_shape){1, {2048}}, 0, 9);
  gr_output data[2] = {gr_const(g, &xs), gr_const(g, &ys)};
  gr_tensor_release(&xs);
  gr_tensor_release(&ys);
  gr_output b = gr_batch(g, gr_global_step(g), data, 2, 128, 0, true, 1, 0);
  static const int64_t sizes[4] = {784, 256, 256, 10};
  gr_output h = b, ws[3];
  for (int l = 0; l < 3; l++) {
    char name[8];
    snprintf(name, sizeof name, "w%d", l);
    ws[l] = gr_variable(g, name,
                        gr_glorot_uniform(g, GR_F32, (gr_shape){2, {sizes[l], sizes[l + 1]}}, l));
    h = gr_matmul(g, h, ws[l], false, false);
    if (l < 2) h = gr_relu(g, h);
  }
  gr_output loss =
      gr_reduce_mean(g, gr_sparse_softmax_cross_entropy(g, h, gr_output_at(b, 1)), NULL, 0, false);
  gr_optimizer sgd = {.kind = GR_OPT_SGD, .learning_rate = 0.1};
  gr_output op = gr_minimize(g, &sgd, loss, NULL, 0);
  gr_error err;
  gr_session_options o = {.inter_op_threads = threads};
  gr_session *s = gr_session_new(g, &o, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  for (int i = 0; i < steps; i++) {
    gr_tensor l;
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &loss, 1, &l, &op, 1, &err), err);
    gr_tensor_release(&l);
  }
  GR_CHECK_OK(gr_session_run(s, NULL, 0, ws, 3, w, NULL, 0, &err), err);
  gr_session_free(s);
  gr_graph_free(g);
}

static void test_training_threads(void) {
  gr_tensor w1[3], w2[3], w2b[3];
  train(1, 40, w1); /* 40 steps: 2.5 epochs of 16 batches */
  train(2, 40, w2);
  train(2, 40, w2b);
  for (int i = 0; i < 3; i++) {
    GR_CHECK_MSG(same_bits(&w1[i], &w2[i]), "w%d: 2 threads end with other weights than 1", i);
    GR_CHECK_MSG(same_bits(&w2[i], &w2b[i]), "w%d: two runs with 2 threads differ", i);
    gr_tensor_release(&w1[i]);
    gr_tensor_release(&w2[i]);
    gr_tensor_release(&w2b[i]);
  }
}

static void count_chunk(void *arg, int i) {
  __atomic_add_fetch(&((int *)arg)[i], 1, __ATOMIC_RELAXED);
}

typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open, started;
  char order[8];
  int n;
} gate;

static void wait_gate(void *arg) { /* holds the pool's thread until opened */
  gate *g = arg;
  pthread_mutex_lock(&g->mu);
  g->started = 1;
  pthread_cond_broadcast(&g->cv);
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}
static void mark(gate *g, char c) {
  pthread_mutex_lock(&g->mu);
  g->order[g->n++] = c;
  pthread_mutex_unlock(&g->mu);
}
static void mark_a(void *arg) {
  mark(arg, 'a');
}
static void mark_b(void *arg) {
  mark(arg, 'b');
}
static void mark_c(void *arg) {
  mark(arg, 'c');
}
static int marks(gate *g) {
  pthread_mutex_lock(&g->mu);
  int n = g->n;
  pthread_mutex_unlock(&g->mu);
  return n;
}

static void test_parallel_chunks(void) {
  for (int threads = 0; threads <= 2; threads++) {
    gr_threadpool *pool = threads ? gr_threadpool_new(threads) : NULL;
    gr_kernel_ctx ctx = {.pool = pool};
    GR_CHECK_EQ_INT(gr_kernel_parallel_threads(&ctx), threads + 1);
    for (int rep = 0; rep < 300; rep++) {
      int n = 1 + rep % 9, seen[9] = {0};
      gr_kernel_parallel(&ctx, n, count_chunk, seen);
      for (int i = 0; i < n; i++)
        GR_CHECK_MSG(seen[i] == 1, "%d pool threads, %d chunks: chunk %d ran %d times", threads, n,
                     i, seen[i]);
    }
    gr_threadpool_free(pool);
  }
  /* one worker, held: b scheduled first after a runs before it, and c,
   * scheduled for idle time before both, after them */
  gr_threadpool *pool = gr_threadpool_new(1);
  gate g = {.n = 0};
  pthread_mutex_init(&g.mu, NULL);
  pthread_cond_init(&g.cv, NULL);
  gr_threadpool_schedule(pool, wait_gate, &g);
  pthread_mutex_lock(&g.mu);
  while (!g.started) pthread_cond_wait(&g.cv, &g.mu);
  pthread_mutex_unlock(&g.mu);
  gr_threadpool_schedule_idle(pool, mark_c, &g);
  gr_threadpool_schedule(pool, mark_a, &g);
  gr_threadpool_schedule_first(pool, mark_b, &g);
  pthread_mutex_lock(&g.mu);
  g.open = 1;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  /* then, the worker asleep, an idle-time closure wakes it (each waited
   * for up to 60 s) */
  for (int want = 3; want <= 4; want++) {
    if (want == 4) gr_threadpool_schedule_idle(pool, mark_c, &g);
    for (int k = 0; k < 600000 && marks(&g) < want; k++) usleep(100);
    GR_CHECK_EQ_INT(marks(&g), want);
  }
  gr_threadpool_free(pool); /* joins */
  GR_CHECK(g.order[0] == 'b' && g.order[1] == 'a' && g.order[2] == 'c' && g.order[3] == 'c');
  pthread_cond_destroy(&g.cv);
  pthread_mutex_destroy(&g.mu);
}

int main(void) {
  GR_RUN(test_parallel_chunks);
  GR_RUN(test_split_products);
  GR_RUN(test_prefetched_batches);
  GR_RUN(test_training_threads);
  return gr_test_finish();
}
