/* FIFO queue ops (ops/queue_ops.c): order, several components, enqueue_many
 * and dequeue_many, a queue shared by two sessions through one container,
 * a dequeue that waits for another run's enqueue, capacity (an enqueue
 * that waits for room), close (out of range when closed and empty, later
 * enqueues cancelled, a waiting dequeue woken), a waiting dequeue woken by
 * the step timeout and by another node's error, bad inputs with errors
 * naming the node, and the DSL forms. Every wait is bounded by a step
 * timeout. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gr_dsl.h"
#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

#define TIMEOUT_MS 10000

static gr_session *session_on(gr_graph *g, gr_resource_mgr *m, int timeout_ms, gr_error *err) {
  gr_session_options o = {.inter_op_threads = 2, .resources = m, .step_timeout_ms = timeout_ms};
  return gr_session_new(g, &o, err);
}

static const char *graph_msg(gr_graph *g) {
  return gr_graph_error(g) ? gr_graph_error(g)->msg : "";
}

/* A graph on queue "q" of f32 scalars: feed x and run enq; run deq; size. */
typedef struct qgraph {
  gr_graph *g;
  gr_output q, x, xs, enq, enq_many, deq, deq3, size, close;
} qgraph;

static void qgraph_make(qgraph *t, int64_t capacity) {
  t->g = gr_graph_new();
  gr_graph *g = t->g;
  t->q = gr_fifo_queue(g, "q", 1, (gr_dtype[]){GR_F32}, (gr_shape[]){gr_shape_scalar()}, capacity);
  t->x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  t->xs = gr_placeholder(g, "xs", GR_F32, gr_shape_make(1, (int64_t[]){-1}));
  t->enq = gr_queue_enqueue(g, t->q, &t->x, 1);
  t->enq_many = gr_queue_enqueue_many(g, t->q, &t->xs, 1);
  gr_queue_dequeue(g, t->q, &t->deq);
  gr_queue_dequeue_many(g, t->q, 3, &t->deq3);
  t->size = gr_queue_size(g, t->q);
  t->close = gr_queue_close(g, t->q, false);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", graph_msg(g));
}

static gr_status enqueue_f32(gr_session *s, qgraph *t, float v, gr_error *err) {
  gr_tensor x = gr_tensor_scalar_f32(v);
  gr_feed f = {t->x, &x};
  gr_status st = gr_session_run(s, &f, 1, NULL, 0, NULL, &t->enq, 1, err);
  gr_tensor_release(&x);
  return st;
}

static gr_status dequeue_f32(gr_session *s, qgraph *t, float *v, gr_error *err) {
  gr_tensor out;
  gr_status st = gr_session_run(s, NULL, 0, &t->deq, 1, &out, NULL, 0, err);
  if (st == GR_OK) {
    *v = (float)gr_tensor_get_f64(&out, 0);
    gr_tensor_release(&out);
  }
  return st;
}

static int64_t size_of(gr_session *s, qgraph *t) {
  gr_tensor out;
  gr_error err;
  if (gr_session_run(s, NULL, 0, &t->size, 1, &out, NULL, 0, &err) != GR_OK) return -1;
  int64_t n = (int64_t)gr_tensor_get_f64(&out, 0);
  gr_tensor_release(&out);
  return n;
}

static void test_order_and_many(void) {
  qgraph t;
  qgraph_make(&t, -1);
  gr_error err;
  gr_session *s = session_on(t.g, NULL, TIMEOUT_MS, &err);
  GR_CHECK(s != NULL);
  for (int i = 1; i <= 4; i++) GR_CHECK(enqueue_f32(s, &t, (float)i, &err) == GR_OK);
  float xs[5] = {10, 11, 12, 13, 14};
  gr_tensor many;
  gr_tensor_from_data(&many, GR_F32, &(gr_shape){1, {5}}, xs, &err);
  gr_feed f = {t.xs, &many};
  GR_CHECK(gr_session_run(s, &f, 1, NULL, 0, NULL, &t.enq_many, 1, &err) == GR_OK);
  gr_tensor_release(&many);
  GR_CHECK_EQ_INT(size_of(s, &t), 9);
  for (int i = 1; i <= 4; i++) {
    float v = 0;
    GR_CHECK(dequeue_f32(s, &t, &v, &err) == GR_OK);
    GR_CHECK_EQ_INT((int)v, i);
  }
  gr_tensor out;
  GR_CHECK(gr_session_run(s, NULL, 0, &t.deq3, 1, &out, NULL, 0, &err) == GR_OK);
  GR_CHECK_EQ_INT(out.shape.rank, 1);
  GR_CHECK_EQ_INT(out.shape.dims[0], 3);
  for (int i = 0; i < 3; i++) GR_CHECK_EQ_INT((int)gr_tensor_get_f64(&out, i), 10 + i);
  gr_tensor_release(&out);
  GR_CHECK_EQ_INT(size_of(s, &t), 2);
  gr_session_free(s);
  gr_graph_free(t.g);
}

static void test_components(void) {
  gr_graph *g = gr_graph_new();
  gr_output q =
      gr_fifo_queue(g, "pairs", 2, (gr_dtype[]){GR_F32, GR_I64},
                    (gr_shape[]){gr_shape_make(1, (int64_t[]){2}), gr_shape_scalar()}, -1);
  gr_output rows = gr_placeholder(g, "rows", GR_F32, gr_shape_make(2, (int64_t[]){-1, 2}));
  gr_output ids = gr_placeholder(g, "ids", GR_I64, gr_shape_make(1, (int64_t[]){-1}));
  gr_output enq = gr_queue_enqueue_many(g, q, (gr_output[]){rows, ids}, 2);
  gr_output one[2], two[2];
  gr_queue_dequeue(g, q, one);
  gr_queue_dequeue_many(g, q, 2, two);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", graph_msg(g));
  GR_CHECK_EQ_INT(one[0].node->out_shapes[0].rank, 1);
  GR_CHECK_EQ_INT(two[0].node->out_shapes[0].dims[0], 2);
  gr_error err;
  gr_session *s = session_on(g, NULL, TIMEOUT_MS, &err);
  float r[6] = {1, 2, 3, 4, 5, 6};
  int64_t id[3] = {7, 8, 9};
  gr_tensor rt, it;
  gr_tensor_from_data(&rt, GR_F32, &(gr_shape){2, {3, 2}}, r, &err);
  gr_tensor_from_data(&it, GR_I64, &(gr_shape){1, {3}}, id, &err);
  gr_feed f[2] = {{rows, &rt}, {ids, &it}};
  GR_CHECK(gr_session_run(s, f, 2, NULL, 0, NULL, &enq, 1, &err) == GR_OK);
  gr_tensor o[2];
  GR_CHECK(gr_session_run(s, NULL, 0, one, 2, o, NULL, 0, &err) == GR_OK);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&o[0], 1), 2);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&o[1], 0), 7);
  gr_tensor_release(&o[0]), gr_tensor_release(&o[1]);
  GR_CHECK(gr_session_run(s, NULL, 0, two, 2, o, NULL, 0, &err) == GR_OK);
  GR_CHECK_EQ_INT(o[0].shape.dims[0], 2);
  GR_CHECK_EQ_INT(o[0].shape.dims[1], 2);
  for (int i = 0; i < 4; i++) GR_CHECK_EQ_INT(gr_tensor_get_f64(&o[0], i), 3 + i);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&o[1], 1), 9);
  gr_tensor_release(&o[0]), gr_tensor_release(&o[1]);
  gr_tensor_release(&rt), gr_tensor_release(&it);
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- waiting across runs ----------------------------------------------------------------------
 */

typedef struct bg {
  gr_session *s;
  qgraph *t;
  int op; /* 0 dequeue, 1 enqueue of value */
  float value;
  gr_status st;
  gr_error err;
  volatile int finished;
  double t_end;
} bg;

static void *bg_run(void *arg) {
  bg *b = arg;
  if (b->op == 0)
    b->st = dequeue_f32(b->s, b->t, &b->value, &b->err);
  else
    b->st = enqueue_f32(b->s, b->t, b->value, &b->err);
  b->t_end = gt_now();
  __atomic_store_n(&b->finished, 1, __ATOMIC_RELEASE);
  return NULL;
}

static bool wait_finished(bg *b, double seconds) {
  double end = gt_now() + seconds;
  while (!__atomic_load_n(&b->finished, __ATOMIC_ACQUIRE) && gt_now() < end) usleep(1000);
  return __atomic_load_n(&b->finished, __ATOMIC_ACQUIRE);
}

/* Queue graph t (capacity as for qgraph_make) and two sessions on it, two
 * clients sharing one container (returned; two_clients_free ends all). */
static gr_resource_mgr *two_clients(qgraph *t, int capacity, gr_session **s1, gr_session **s2,
                                    gr_error *err) {
  gr_resource_mgr *m = gr_resource_mgr_new();
  qgraph_make(t, capacity);
  *s1 = session_on(t->g, m, TIMEOUT_MS, err);
  *s2 = session_on(t->g, m, TIMEOUT_MS, err);
  return m;
}

static void two_clients_free(gr_resource_mgr *m, qgraph *t, gr_session *s1, gr_session *s2) {
  gr_session_free(s1);
  gr_session_free(s2);
  gr_graph_free(t->g);
  gr_resource_mgr_free(m);
}

/* Starts d in thread *th; whether it is still waiting 100 ms later. */
static bool started_waiting(bg *d, pthread_t *th) {
  pthread_create(th, NULL, bg_run, d);
  usleep(100 * 1000);
  return !d->finished;
}

/* Two sessions (two clients) on one container share queue "q": a dequeue
 * in one waits, without a thread spinning, until the other enqueues. */
static void test_dequeue_waits_for_other_session(void) {
  gr_resource_mgr *m = gr_resource_mgr_new();
  qgraph a, b;
  qgraph_make(&a, -1);
  qgraph_make(&b, -1);
  gr_error err;
  gr_session *sa = session_on(a.g, m, TIMEOUT_MS, &err), *sb = session_on(b.g, m, TIMEOUT_MS, &err);
  bg d = {.s = sa, .t = &a, .op = 0};
  pthread_t th;
  GR_CHECK_MSG(started_waiting(&d, &th), "the dequeue did not wait");
  struct timespec c0, c1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  usleep(200 * 1000);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
  GR_CHECK_MSG(cpu < 0.05, "waiting used %.3f s of CPU in 0.2 s", cpu);
  double t0 = gt_now();
  GR_CHECK(enqueue_f32(sb, &b, 42.0f, &err) == GR_OK);
  GR_CHECK(wait_finished(&d, 5));
  pthread_join(th, NULL);
  GR_CHECK_MSG(d.st == GR_OK, "%s", d.err.msg);
  GR_CHECK_EQ_INT((int)d.value, 42);
  GR_CHECK_MSG(d.t_end - t0 < 1.0, "woke %.3f s after the enqueue", d.t_end - t0);
  gr_session_free(sa);
  gr_session_free(sb);
  gr_graph_free(a.g);
  gr_graph_free(b.g);
  gr_resource_mgr_free(m);
}

static void test_capacity_blocks_enqueue(void) {
  qgraph t;
  gr_session *s1, *s2;
  gr_error err;
  gr_resource_mgr *m = two_clients(&t, 2, &s1, &s2, &err);
  GR_CHECK(enqueue_f32(s1, &t, 1, &err) == GR_OK);
  GR_CHECK(enqueue_f32(s1, &t, 2, &err) == GR_OK);
  bg e = {.s = s2, .t = &t, .op = 1, .value = 3};
  pthread_t th;
  GR_CHECK_MSG(started_waiting(&e, &th), "the enqueue into a full queue did not wait");
  GR_CHECK_EQ_INT(size_of(s1, &t), 2);
  float v = 0;
  GR_CHECK(dequeue_f32(s1, &t, &v, &err) == GR_OK);
  GR_CHECK_EQ_INT((int)v, 1);
  GR_CHECK(wait_finished(&e, 5));
  pthread_join(th, NULL);
  GR_CHECK_MSG(e.st == GR_OK, "%s", e.err.msg);
  GR_CHECK(dequeue_f32(s1, &t, &v, &err) == GR_OK);
  GR_CHECK_EQ_INT((int)v, 2);
  GR_CHECK(dequeue_f32(s1, &t, &v, &err) == GR_OK);
  GR_CHECK_EQ_INT((int)v, 3);
  two_clients_free(m, &t, s1, s2);
}

static void test_close(void) {
  qgraph t;
  gr_session *s, *s2;
  gr_error err;
  gr_resource_mgr *m = two_clients(&t, -1, &s, &s2, &err);
  /* a waiting dequeue is woken by close: closed and empty is out of range */
  bg d = {.s = s2, .t = &t, .op = 0};
  pthread_t th;
  GR_CHECK_MSG(started_waiting(&d, &th), "it did not wait");
  GR_CHECK(enqueue_f32(s, &t, 5, &err) == GR_OK); /* served to the waiter */
  GR_CHECK(wait_finished(&d, 5));
  pthread_join(th, NULL);
  GR_CHECK(d.st == GR_OK && (int)d.value == 5);
  d = (bg){.s = s2, .t = &t, .op = 0};
  GR_CHECK_MSG(started_waiting(&d, &th), "it did not wait");
  GR_CHECK(enqueue_f32(s, &t, 6, &err) == GR_OK);
  GR_CHECK(wait_finished(&d, 5));
  pthread_join(th, NULL);
  GR_CHECK(enqueue_f32(s, &t, 7, &err) == GR_OK);
  GR_CHECK(enqueue_f32(s, &t, 8, &err) == GR_OK);
  d = (bg){.s = s2, .t = &t, .op = 0};
  GR_CHECK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &t.close, 1, &err) == GR_OK);
  /* what is there can still be taken, in order */
  float v = 0;
  GR_CHECK(dequeue_f32(s, &t, &v, &err) == GR_OK);
  GR_CHECK_EQ_INT((int)v, 7);
  /* too few for dequeue_many(3): out of range, the element stays */
  gr_tensor out;
  gr_status st = gr_session_run(s, NULL, 0, &t.deq3, 1, &out, NULL, 0, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_OUT_OF_RANGE);
  GR_CHECK_STR_CONTAINS(err.msg, "queue 'q' is closed and has too few elements (requested 3, "
                                 "current size 1)");
  GR_CHECK_STR_CONTAINS(err.msg, "queue_dequeue_many");
  GR_CHECK(dequeue_f32(s, &t, &v, &err) == GR_OK);
  GR_CHECK_EQ_INT((int)v, 8);
  st = dequeue_f32(s, &t, &v, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_OUT_OF_RANGE);
  GR_CHECK_STR_CONTAINS(err.msg,
                        "is closed and has too few elements (requested 1, current size 0)");
  st = enqueue_f32(s, &t, 9, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_CANCELLED);
  GR_CHECK_STR_CONTAINS(err.msg, "queue 'q' is closed");
  GR_CHECK_STR_CONTAINS(err.msg, "queue_enqueue");
  two_clients_free(m, &t, s, s2);
}

/* A dequeue waiting when close comes is woken with out of range. */
static void test_close_wakes_dequeue(void) {
  qgraph t;
  gr_session *s, *s2;
  gr_error err;
  gr_resource_mgr *m = two_clients(&t, -1, &s, &s2, &err);
  bg d = {.s = s2, .t = &t, .op = 0};
  pthread_t th;
  GR_CHECK_MSG(started_waiting(&d, &th), "it did not wait");
  GR_CHECK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &t.close, 1, &err) == GR_OK);
  GR_CHECK(wait_finished(&d, 5));
  pthread_join(th, NULL);
  GR_CHECK_EQ_INT(d.st, GR_ERR_OUT_OF_RANGE);
  GR_CHECK_STR_CONTAINS(d.err.msg, "closed");
  two_clients_free(m, &t, s, s2);
}

/* The step timeout's watchdog cancels a dequeue that nobody will serve;
 * an error elsewhere in the step cancels it too; the queue stays usable. */
static void test_abort_wakes_dequeue(void) {
  qgraph t;
  qgraph_make(&t, -1);
  gr_output idx = gr_placeholder(t.g, "idx", GR_I64, gr_shape_make(1, (int64_t[]){1}));
  gr_output bad = gr_gather(t.g, gr_zeros(t.g, GR_F32, gr_shape_make(1, (int64_t[]){3})), idx, 0);
  GR_CHECK_MSG(bad.node != NULL, "%s", graph_msg(t.g));
  gr_error err;
  gr_session *s = session_on(t.g, NULL, 300, &err);
  double t0 = gt_now();
  float v;
  gr_status st = dequeue_f32(s, &t, &v, &err);
  double dt = gt_now() - t0;
  GR_CHECK_EQ_INT(st, GR_ERR_DEADLINE_EXCEEDED);
  GR_CHECK_STR_CONTAINS(err.msg, "queue_dequeue");
  GR_CHECK_MSG(dt < 5.0, "the timeout took %.2f s", dt);
  /* a failing node in the same step cancels the waiting dequeue at once */
  int64_t i = 99;
  gr_tensor it;
  gr_tensor_from_data(&it, GR_I64, &(gr_shape){1, {1}}, &i, &err);
  gr_feed f = {idx, &it};
  gr_output fetch[2] = {t.deq, bad};
  gr_tensor outs[2];
  t0 = gt_now();
  st = gr_session_run(s, &f, 1, fetch, 2, outs, NULL, 0, &err);
  dt = gt_now() - t0;
  /* the gather's error, not the 300 ms timeout's: the failure cancelled the
   * dequeue (the bound only ends a hang, also on a busy machine) */
  GR_CHECK(st != GR_OK && st != GR_ERR_DEADLINE_EXCEEDED);
  GR_CHECK_STR_CONTAINS(err.msg, "gather");
  GR_CHECK_MSG(dt < 20, "the cancelled step took %.3f s", dt);
  gr_tensor_release(&it);
  /* still usable */
  GR_CHECK(enqueue_f32(s, &t, 3, &err) == GR_OK);
  GR_CHECK(dequeue_f32(s, &t, &v, &err) == GR_OK);
  GR_CHECK_EQ_INT((int)v, 3);
  gr_session_free(s);
  gr_graph_free(t.g);
}

/* ---- bad inputs -------------------------------------------------------------------------------
 */

static void test_bad_inputs(void) {
  gr_graph *g = gr_graph_new();
  gr_output q = gr_fifo_queue(g, "q", 1, (gr_dtype[]){GR_F32}, (gr_shape[]){gr_shape_scalar()}, -1);
  gr_output e = gr_queue_enqueue(g, q, (gr_output[]){gr_const_i64(g, 1)}, 1);
  GR_CHECK(e.node == NULL);
  GR_CHECK_STR_CONTAINS(graph_msg(g), "queue_enqueue");
  GR_CHECK_STR_CONTAINS(graph_msg(g), "component 0 is i64, queue 'q' holds f32");
  gr_graph_clear_error(g);
  e = gr_queue_enqueue(g, q, (gr_output[]){gr_const_f32(g, 1), gr_const_f32(g, 2)}, 2);
  GR_CHECK_STR_CONTAINS(graph_msg(g), "queue 'q' holds 1 components, 2 given");
  gr_graph_clear_error(g);
  e = gr_queue_enqueue(g, gr_const_f32(g, 1), (gr_output[]){gr_const_f32(g, 1)}, 1);
  GR_CHECK_STR_CONTAINS(graph_msg(g), "is not a queue");
  gr_graph_clear_error(g);
  gr_fifo_queue(g, "q", 1, (gr_dtype[]){GR_F32}, NULL, -1);
  GR_CHECK_STR_CONTAINS(graph_msg(g), "duplicate node name 'q'");
  gr_graph_clear_error(g);
  gr_fifo_queue(g, "none", 0, (gr_dtype[]){GR_F32}, NULL, -1);
  GR_CHECK_STR_CONTAINS(graph_msg(g), "1 to 16 components");
  gr_graph_free(g);

  /* at run time: a row of the wrong shape; a queue made twice differently */
  gr_resource_mgr *m = gr_resource_mgr_new();
  g = gr_graph_new();
  q = gr_fifo_queue(g, "q", 1, (gr_dtype[]){GR_F32}, (gr_shape[]){gr_shape_make(1, (int64_t[]){2})},
                    -1);
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(1, (int64_t[]){-1}));
  e = gr_queue_enqueue(g, q, &x, 1);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", graph_msg(g));
  gr_error err;
  gr_session *s = session_on(g, m, TIMEOUT_MS, &err);
  float three[3] = {1, 2, 3};
  gr_tensor xt;
  gr_tensor_from_data(&xt, GR_F32, &(gr_shape){1, {3}}, three, &err);
  gr_feed f = {x, &xt};
  gr_status st = gr_session_run(s, &f, 1, NULL, 0, NULL, &e, 1, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_SHAPE);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'queue_enqueue' (op queue_enqueue)");
  GR_CHECK_STR_CONTAINS(err.msg, "element shape [3], queue 'q' holds [2]");
  gr_tensor_release(&xt);
  gr_graph *g2 = gr_graph_new();
  gr_output q2 = gr_fifo_queue(g2, "q", 1, (gr_dtype[]){GR_F64}, NULL, 4);
  gr_session *s2 = session_on(g2, m, TIMEOUT_MS, &err);
  gr_tensor out;
  st = gr_session_run(s2, NULL, 0, &q2, 1, &out, NULL, 0, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'q' (op fifo_queue)");
  GR_CHECK_STR_CONTAINS(err.msg, "queue 'q' exists with dtypes [f32 [2]], capacity -1; this node "
                                 "makes it with dtypes [f64 any shape], capacity 4");
  gr_session_free(s2);
  gr_graph_free(g2);
  gr_session_free(s);
  gr_graph_free(g);
  gr_resource_mgr_free(m);
}

/* ---- DSL ----------------------------------------------------------------------------------------
 */

static void test_dsl(void) {
  const char *src = "q = fifo_queue([f32, i64], shapes=[[2], []], capacity=4)\n"
                    "enq = queue_enqueue_many(q, [[1, 2], [3, 4], [5, 6]], [7, 8, 9])\n"
                    "a, b = queue_dequeue(q)\n"
                    "rows, ids = queue_dequeue_many(q, 2)\n"
                    "n = queue_size(q)\n"
                    "done = queue_close(q)\n";
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p;
  gr_error err;
  GR_CHECK_MSG(gr_dsl_load_string("q.gr", src, g, NULL, &p, &err) == GR_OK, "%s", err.msg);
  gr_output enq, a, ids, n;
  GR_CHECK(gr_dsl_lookup(p, "enq", &enq) && gr_dsl_lookup(p, "a", &a) &&
           gr_dsl_lookup(p, "ids", &ids) && gr_dsl_lookup(p, "n", &n));
  gr_session *s = session_on(g, NULL, TIMEOUT_MS, &err);
  GR_CHECK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &enq, 1, &err) == GR_OK);
  gr_tensor o[2];
  GR_CHECK_MSG(gr_session_run(s, NULL, 0, (gr_output[]){a, n}, 2, o, NULL, 0, &err) == GR_OK, "%s",
               err.msg);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&o[0], 1), 2);
  gr_tensor_release(&o[0]), gr_tensor_release(&o[1]);
  GR_CHECK(gr_session_run(s, NULL, 0, &ids, 1, o, NULL, 0, &err) == GR_OK);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&o[0], 0), 8);
  GR_CHECK_EQ_INT(gr_tensor_get_f64(&o[0], 1), 9);
  gr_tensor_release(&o[0]);
  gr_session_free(s);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  /* errors point at the call */
  g = gr_graph_new();
  GR_CHECK(gr_dsl_load_string("bad.gr", "q = fifo_queue(3)", g, NULL, &p, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "bad.gr:1:16");
  GR_CHECK_STR_CONTAINS(err.msg, "want a dtype or a list");
  gr_dsl_program_free(p);
  gr_graph_free(g);
  g = gr_graph_new();
  GR_CHECK(gr_dsl_load_string("bad.gr", "q = fifo_queue(f32)\nx = queue_dequeue_many(q)", g, NULL,
                              &p, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "bad.gr:2:5");
  GR_CHECK_STR_CONTAINS(err.msg, "takes the queue and a count");
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_order_and_many);
  GR_RUN(test_components);
  GR_RUN(test_dequeue_waits_for_other_session);
  GR_RUN(test_capacity_blocks_enqueue);
  GR_RUN(test_close);
  GR_RUN(test_close_wakes_dequeue);
  GR_RUN(test_abort_wakes_dequeue);
  GR_RUN(test_bad_inputs);
  GR_RUN(test_dsl);
  return gr_test_finish();
}
