/* gr_executor_run_async: static and control-flow graphs, pools of 0 and of
 * several threads, many concurrent runs of one executor whose async kernels
 * complete on another thread; done is called exactly once, after the
 * fetches are filled; a kernel's error and a watchdog's cancellation
 * arrive through done. Every wait is bounded. */
#include <graphrun.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/executor.h"
#include "core/step_watch_internal.h"
#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

/* ---- a gate: an async identity that completes when the test opens it -------- */

enum { MAX_WAITING = 4096 };
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static gr_kernel_ctx *gate_waiting[MAX_WAITING];
static int gate_n;
static int gate_cancels;
static bool gate_cancel_opens_all; /* a cancel also completes every other waiting kernel */
static int gate_open(void);

static void gate_cancel(void *arg) {
  gr_kernel_ctx *ctx = arg;
  pthread_mutex_lock(&gate_mu);
  bool found = false;
  for (int i = 0; i < gate_n && !found; i++)
    if (gate_waiting[i] == ctx) {
      gate_waiting[i] = gate_waiting[--gate_n];
      found = true;
    }
  if (found) gate_cancels++;
  pthread_mutex_unlock(&gate_mu);
  if (found) gr_kernel_done(ctx, GR_ERR_CANCELLED);
  if (found && gate_cancel_opens_all) gate_open();
}

static gr_status gate_kernel(gr_kernel_ctx *ctx) {
  pthread_mutex_lock(&gate_mu);
  GR_ASSERT(gate_n < MAX_WAITING);
  gate_waiting[gate_n++] = ctx;
  pthread_mutex_unlock(&gate_mu);
  gr_kernel_on_cancel(ctx, gate_cancel, ctx);
  return GR_OK;
}

/* Completes every kernel waiting at the gate now; returns how many. */
static int gate_open(void) {
  gr_kernel_ctx *todo[MAX_WAITING];
  pthread_mutex_lock(&gate_mu);
  int n = gate_n;
  memcpy(todo, gate_waiting, sizeof(todo[0]) * (size_t)n);
  gate_n = 0;
  pthread_mutex_unlock(&gate_mu);
  for (int i = 0; i < n; i++) {
    gr_kernel_set_output(todo[i], 0, &todo[i]->inputs[0]);
    gr_kernel_done(todo[i], GR_OK);
  }
  return n;
}

static int gate_count(void) {
  pthread_mutex_lock(&gate_mu);
  int n = gate_n;
  pthread_mutex_unlock(&gate_mu);
  return n;
}

static const gr_op_def test_gate = GT_UNARY_OP_DEF("test_gate", gate_kernel, NULL, 0, GR_OP_ASYNC);

static gr_status fail_kernel(gr_kernel_ctx *ctx) {
  return gr_kernel_error(ctx, GR_ERR_ABORTED, "failed on purpose");
}
static const gr_op_def test_fail = GT_UNARY_OP_DEF("test_fail_now", fail_kernel, NULL, 0, 0);

/* ---- runs and their done ------------------------------------------------------- */

typedef struct run {
  gr_tensor feed, out;
  gr_step_info step;
  int calls; /* done calls (atomic) */
  gr_status status;
  gr_error err;
  bool out_set_at_done;
} run;

static pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static int done_total;

static void on_done(void *arg, gr_status status, const gr_error *err) {
  run *r = arg;
  r->status = status;
  if (status != GR_OK) r->err = *err;
  r->out_set_at_done = r->out.buf != NULL;
  __atomic_add_fetch(&r->calls, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_lock(&done_mu);
  done_total++;
  pthread_cond_broadcast(&done_cv);
  pthread_mutex_unlock(&done_mu);
}

/* Opens the gate from this thread until `want` runs are done (10 s at most). */
static bool open_until_done(int want) {
  double end = gt_now() + 10;
  for (;;) {
    pthread_mutex_lock(&done_mu);
    int got = done_total;
    pthread_mutex_unlock(&done_mu);
    if (got >= want) return true;
    if (gt_now() > end) return false;
    if (gate_open() == 0) usleep(200);
  }
}

typedef struct opener {
  pthread_t t;
  int want;
  bool ok;
} opener;
static void *opener_main(void *arg) {
  opener *o = arg;
  o->ok = open_until_done(o->want);
  return NULL;
}

/* An executor over every node of g but the placeholder x. */
static gr_executor *executor_of(gr_graph *g, gr_output x, gr_output fetch, gr_threadpool *pool) {
  GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  int n = gr_graph_num_nodes(g), k = 0;
  gr_node **nodes = malloc(sizeof *nodes * (size_t)n);
  for (int i = 0; i < n; i++)
    if (gr_graph_node(g, i) != x.node) nodes[k++] = gr_graph_node(g, i);
  gr_executor *ex = NULL;
  gr_error err;
  GR_CHECK_OK(gr_executor_new(nodes, k, &x, 1, &fetch, 1, pool, &ex, &err), err);
  free(nodes);
  return ex;
}

/* x -> gate -> +1 -> gate -> +1 (static) */
static gr_output static_graph(gr_graph *g, gr_output *x) {
  *x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output h = *x;
  for (int i = 0; i < 2; i++) {
    h = gr_op(g, "test_gate", NULL, &h, 1, NULL, 0);
    h = gr_add(g, h, gr_const_f32(g, 1));
  }
  return h;
}

static gr_output loop_cond(gr_graph *g, void *arg, const gr_output *v) {
  (void)arg;
  return gr_less(g, v[1], gr_const_f32(g, 5));
}
static void loop_body(gr_graph *g, void *arg, const gr_output *v, gr_output *next) {
  (void)arg;
  next[0] = gr_add(g, gr_op(g, "test_gate", NULL, &v[0], 1, NULL, 0), gr_const_f32(g, 1));
  next[1] = gr_add(g, v[1], gr_const_f32(g, 1));
}

/* while i < 5: x = gate(x) + 1 (control flow): x + 5 */
static gr_output loop_graph(gr_graph *g, gr_output *x) {
  *x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output vars[2] = {*x, gr_const_f32(g, 0)};
  gr_while_loop(g, loop_cond, loop_body, NULL, 2, vars, 0);
  return vars[0];
}

/* `runs` concurrent async runs of one executor; the gate is opened from
 * another thread; each run gets x = i and must give i + add. */
static void concurrent_runs(bool cf, int threads, int runs, float add) {
  gr_graph *g = gr_graph_new();
  gr_output x;
  gr_output y = cf ? loop_graph(g, &x) : static_graph(g, &x);
  gr_threadpool *pool = gr_threadpool_new(threads);
  gr_executor *ex = executor_of(g, x, y, pool);
  run *rs = calloc((size_t)runs, sizeof *rs);
  done_total = 0;
  for (int i = 0; i < runs; i++) {
    rs[i].feed = gr_tensor_scalar_f32((float)i);
    rs[i].step = (gr_step_info){.step_id = i};
    gr_executor_run_async(ex, &rs[i].feed, &rs[i].out, &rs[i].step, on_done, &rs[i]);
  }
  GR_CHECK_EQ_INT(done_total, 0); /* every run waits at the gate */
  opener o = {.want = runs};
  pthread_create(&o.t, NULL, opener_main, &o);
  pthread_join(o.t, NULL);
  GR_CHECK_MSG(o.ok, "%d of %d runs done after 10 s (cf %d, %d threads)", done_total, runs, cf,
               threads);
  usleep(2000); /* a second done call would come now */
  for (int i = 0; i < runs; i++) {
    GR_CHECK_EQ_INT(rs[i].calls, 1);
    GR_CHECK_OK(rs[i].status, rs[i].err);
    GR_CHECK(rs[i].out_set_at_done);
    if (rs[i].out.buf) GR_CHECK_NEAR(gr_tensor_get_f64(&rs[i].out, 0), i + add, 0);
    gr_tensor_release(&rs[i].out);
    gr_tensor_release(&rs[i].feed);
  }
  free(rs);
  gr_executor_free(ex);
  gr_threadpool_free(pool);
  gr_graph_free(g);
}

static void test_static_concurrent(void) {
  concurrent_runs(false, 0, 64, 2);
  concurrent_runs(false, 3, 64, 2);
}

static void test_cf_concurrent(void) {
  concurrent_runs(true, 0, 32, 5);
  concurrent_runs(true, 3, 32, 5);
}

static void plain_body(gr_graph *g, void *arg, const gr_output *v, gr_output *next) {
  (void)arg;
  next[0] = gr_add(g, v[0], gr_const_f32(g, 1));
  next[1] = gr_add(g, v[1], gr_const_f32(g, 1));
}

/* Without async kernels and without pool threads, the run is over before
 * gr_executor_run_async returns, on the calling thread. */
static void test_inline_without_threads(void) {
  for (int cf = 0; cf <= 1; cf++) {
    gr_graph *g = gr_graph_new();
    gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar()), y;
    if (cf) {
      gr_output vars[2] = {x, gr_const_f32(g, 0)};
      gr_while_loop(g, loop_cond, plain_body, NULL, 2, vars, 0);
      y = vars[0]; /* x + 5 */
    } else {
      y = gr_add(g, x, gr_const_f32(g, 5));
    }
    gr_threadpool *pool = gr_threadpool_new(0);
    gr_executor *ex = executor_of(g, x, y, pool);
    run r = {.feed = gr_tensor_scalar_f32(2)};
    gr_executor_run_async(ex, &r.feed, &r.out, &r.step, on_done, &r);
    GR_CHECK_EQ_INT(r.calls, 1);
    GR_CHECK_OK(r.status, r.err);
    GR_CHECK_NEAR(gr_tensor_get_f64(&r.out, 0), 7, 0);
    gr_tensor_release(&r.out);
    gr_tensor_release(&r.feed);
    gr_executor_free(ex);
    gr_threadpool_free(pool);
    gr_graph_free(g);
  }
}

/* A bad feed and a kernel's error come through done, once; the error
 * cancels the run's waiting gate (static path). */
static void test_errors_through_done(void) {
  for (int threads = 0; threads <= 2; threads += 2) {
    gr_graph *g = gr_graph_new();
    gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
    gr_output waits = gr_op(g, "test_gate", NULL, &x, 1, NULL, 0);
    gr_output fails = gr_op(g, "test_fail_now", "breaks", &x, 1, NULL, 0);
    gr_output y = gr_add(g, waits, fails);
    gr_threadpool *pool = gr_threadpool_new(threads);
    gr_executor *ex = executor_of(g, x, y, pool);
    run r = {.feed = gr_tensor_scalar_i32(1)}; /* the wrong dtype */
    gr_executor_run_async(ex, &r.feed, &r.out, &r.step, on_done, &r);
    GR_CHECK_EQ_INT(r.calls, 1);
    GR_CHECK(r.status == GR_ERR_DTYPE);
    gr_tensor_release(&r.feed);
    r = (run){.feed = gr_tensor_scalar_f32(1)};
    gate_cancels = 0;
    done_total = 0;
    gr_executor_run_async(ex, &r.feed, &r.out, &r.step, on_done, &r);
    double end = gt_now() + 10;
    while (__atomic_load_n(&r.calls, __ATOMIC_SEQ_CST) == 0 && gt_now() < end) usleep(200);
    usleep(2000);
    GR_CHECK_EQ_INT(r.calls, 1);
    GR_CHECK(r.status == GR_ERR_ABORTED);
    GR_CHECK_STR_CONTAINS(r.err.msg, "node 'breaks'");
    GR_CHECK(r.out.buf == NULL);
    GR_CHECK(gate_cancels <= 1); /* 0 when the error came before the gate started */
    GR_CHECK_EQ_INT(gate_count(), 0);
    gr_tensor_release(&r.feed);
    gr_executor_free(ex);
    gr_threadpool_free(pool);
    gr_graph_free(g);
  }
}

/* A run that waits at a gate nobody opens: the step's watchdog cancels it
 * and done reports the deadline (static and control flow, 0 and 2 pool
 * threads); the watch ends cleanly afterwards. */
static void test_watchdog_through_done(void) {
  gr_watchdog *d = gr_watchdog_new(100);
  GR_CHECK(d != NULL);
  for (int cf = 0; cf <= 1; cf++)
    for (int threads = 0; threads <= 2; threads += 2) {
      gr_graph *g = gr_graph_new();
      gr_output x;
      gr_output y = cf ? loop_graph(g, &x) : static_graph(g, &x);
      gr_threadpool *pool = gr_threadpool_new(threads);
      gr_executor *ex = executor_of(g, x, y, pool);
      run r = {.feed = gr_tensor_scalar_f32(1)};
      r.step.watch = gr_watchdog_begin_step(d);
      gate_cancels = 0;
      gr_executor_run_async(ex, &r.feed, &r.out, &r.step, on_done, &r);
      double end = gt_now() + 10;
      while (__atomic_load_n(&r.calls, __ATOMIC_SEQ_CST) == 0 && gt_now() < end) usleep(1000);
      usleep(2000);
      GR_CHECK_EQ_INT(r.calls, 1);
      gr_error err = r.err;
      gr_status st = gr_watchdog_end_step(d, r.step.watch, r.status, &err);
      GR_CHECK_MSG(st == GR_ERR_DEADLINE_EXCEEDED, "cf %d threads %d: %s", cf, threads,
                   gr_status_name(st));
      GR_CHECK_STR_CONTAINS(err.msg, "test_gate");
      GR_CHECK_EQ_INT(gate_count(), 0);
      gr_tensor_release(&r.feed);
      gr_executor_free(ex);
      gr_threadpool_free(pool);
      gr_graph_free(g);
    }
  gr_watchdog_free(d);
}

/* Two runs of one step, each waiting at one gate, whose cancel completes
 * the other's kernel (as a receive's cancel aborts the step's rendezvous,
 * failing the other partitions' receives). The watchdog must not finish a
 * run on its own thread while it fires: that run's leaving the watch would
 * wait for the firing to end (it hung so before the fix). */
static void test_watchdog_two_runs_of_a_step(void) {
  gr_watchdog *d = gr_watchdog_new(100);
  GR_CHECK(d != NULL);
  gate_cancel_opens_all = true;
  gr_graph *g[2];
  gr_executor *ex[2];
  run r[2];
  gr_step_watch *watch = gr_watchdog_begin_step(d);
  for (int k = 0; k < 2; k++) {
    g[k] = gr_graph_new();
    gr_output x = gr_placeholder(g[k], "x", GR_F32, gr_shape_scalar());
    gr_output y =
        gr_add(g[k], gr_op(g[k], "test_gate", NULL, &x, 1, NULL, 0), gr_const_f32(g[k], 1));
    ex[k] = executor_of(g[k], x, y, NULL);
    r[k] = (run){.feed = gr_tensor_scalar_f32(1)};
    r[k].step.watch = watch;
  }
  for (int k = 0; k < 2; k++)
    gr_executor_run_async(ex[k], &r[k].feed, &r[k].out, &r[k].step, on_done, &r[k]);
  double end = gt_now() + 10;
  while ((__atomic_load_n(&r[0].calls, __ATOMIC_SEQ_CST) == 0 ||
          __atomic_load_n(&r[1].calls, __ATOMIC_SEQ_CST) == 0) &&
         gt_now() < end)
    usleep(1000);
  usleep(2000);
  bool ended = r[0].calls == 1 && r[1].calls == 1;
  GR_CHECK_MSG(ended, "done calls %d and %d: the watchdog hung", r[0].calls, r[1].calls);
  gate_cancel_opens_all = false;
  if (!ended) return; /* the watchdog thread is stuck: ending the step would hang the test */
  for (int k = 0; k < 2; k++)
    GR_CHECK_MSG(r[k].status == GR_ERR_DEADLINE_EXCEEDED, "run %d: %s", k,
                 gr_status_name(r[k].status));
  gr_error err = r[0].err;
  GR_CHECK(gr_watchdog_end_step(d, watch, r[0].status, &err) == GR_ERR_DEADLINE_EXCEEDED);
  GR_CHECK_EQ_INT(gate_count(), 0);
  for (int k = 0; k < 2; k++) {
    gr_tensor_release(&r[k].feed);
    gr_executor_free(ex[k]);
    gr_graph_free(g[k]);
  }
  gr_watchdog_free(d);
}

static volatile bool opener_stop;
static void *opener_loop(void *arg) {
  (void)arg;
  double end = gt_now() + 10;
  while (!opener_stop && gt_now() < end)
    if (gate_open() == 0) usleep(200);
  return NULL;
}

/* gr_executor_run (the wrapper) gives the result on the caller's thread
 * when the gate is opened from another. */
static void test_sync_wrapper(void) {
  for (int cf = 0; cf <= 1; cf++)
    for (int threads = 0; threads <= 1; threads++) {
      gr_graph *g = gr_graph_new();
      gr_output x;
      gr_output y = cf ? loop_graph(g, &x) : static_graph(g, &x);
      gr_threadpool *pool = gr_threadpool_new(threads);
      gr_executor *ex = executor_of(g, x, y, pool);
      gr_tensor feed = gr_tensor_scalar_f32(10), out;
      gr_step_info step = {0};
      opener_stop = false;
      pthread_t t;
      pthread_create(&t, NULL, opener_loop, NULL);
      gr_error err;
      GR_CHECK_OK(gr_executor_run(ex, &feed, &out, &step, &err), err);
      opener_stop = true;
      pthread_join(t, NULL);
      GR_CHECK_NEAR(gr_tensor_get_f64(&out, 0), cf ? 15 : 12, 0);
      gr_tensor_release(&out);
      gr_tensor_release(&feed);
      gr_executor_free(ex);
      gr_threadpool_free(pool);
      gr_graph_free(g);
    }
}

int main(void) {
  gr_error err;
  gr_ops_register_all();
  gr_op_registry_add(&test_gate, &err);
  gr_op_registry_add(&test_fail, &err);
  GR_RUN(test_inline_without_threads);
  GR_RUN(test_static_concurrent);
  GR_RUN(test_cf_concurrent);
  GR_RUN(test_errors_through_done);
  GR_RUN(test_watchdog_through_done);
  GR_RUN(test_watchdog_two_runs_of_a_step);
  GR_RUN(test_sync_wrapper);
  return gr_test_finish();
}
