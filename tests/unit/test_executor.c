/* The executor: async kernels completing from other threads, cancellation of
 * pending async kernels, inter-op parallelism, and random DAGs evaluated
 * against a plain reference on 1 and several threads. */
#include <graphrun.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_util.h"

/* ---- test-only ops ---------------------------------------------------------- */

typedef struct delayed {
  gr_kernel_ctx *ctx;
  int micros;
} delayed;

static void *complete_later(void *arg) {
  delayed *d = arg;
  usleep((useconds_t)d->micros);
  gr_kernel_set_output(d->ctx, 0, &d->ctx->inputs[0]);
  gr_kernel_done(d->ctx, GR_OK);
  free(d);
  return NULL;
}

/* identity that completes on another thread after attr "micros" */
static gr_status async_delay_kernel(gr_kernel_ctx *ctx) {
  int micros = (int)gr_node_attr_int(ctx->node, "micros", 1000);
  if (micros < 0) { /* completes inline, inside the kernel call */
    gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
    gr_kernel_done(ctx, GR_OK);
    return GR_OK;
  }
  delayed *d = malloc(sizeof *d);
  d->ctx = ctx;
  d->micros = micros;
  pthread_t t;
  pthread_create(&t, NULL, complete_later, d);
  pthread_detach(t);
  return GR_OK;
}

static const gr_attr_spec delay_attrs[] = {
    {"micros", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 1000}}};
static const gr_op_def test_async_delay =
    GT_UNARY_OP_DEF("test_async_delay", async_delay_kernel, delay_attrs, 1, GR_OP_ASYNC);

/* never completes on its own: only cancellation ends it (gt_block_kernel) */
static const gr_op_def test_block =
    GT_UNARY_OP_DEF("test_block", gt_block_kernel, NULL, 0, GR_OP_ASYNC);

/* fails after attr "micros" */
static gr_status fail_kernel(gr_kernel_ctx *ctx) {
  usleep((useconds_t)gr_node_attr_int(ctx->node, "micros", 0));
  return gr_kernel_error(ctx, GR_ERR_ABORTED, "failed on purpose");
}
static const gr_op_def test_fail = GT_UNARY_OP_DEF("test_fail", fail_kernel, delay_attrs, 1, 0);

static void register_test_ops(void) {
  gr_error err;
  gr_ops_register_all();
  gr_op_registry_add(&test_async_delay, &err);
  gr_op_registry_add(&test_block, &err);
  gr_op_registry_add(&test_fail, &err);
  gr_op_registry_add(&gt_busy_op, &err);
}

/* ---- tests -------------------------------------------------------------------- */

static void test_async_chain(void) {
  for (int threads = 1; threads <= 2; threads++) {
    gr_graph *g = gr_graph_new();
    gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
    gr_output h = x;
    for (int i = 0; i < 20; i++) {
      gr_attr a = gr_attr_int("micros", i % 3 == 0 ? -1 : 200);
      h = gr_op(g, "test_async_delay", NULL, &h, 1, &a, 1);
      h = gr_add(g, h, gr_const_f32(g, 1));
    }
    gr_error err;
    gr_session_options o = {.inter_op_threads = threads};
    gr_session *s = gr_session_new(g, &o, &err);
    gr_tensor xv = gr_tensor_scalar_f32(1), out;
    gr_feed f = {x, &xv};
    for (int rep = 0; rep < 3; rep++) {
      GR_CHECK_OK(gr_session_run(s, &f, 1, &h, 1, &out, NULL, 0, &err), err);
      GR_CHECK_NEAR(gr_tensor_get_f64(&out, 0), 21, 0);
      gr_tensor_release(&out);
    }
    gr_tensor_release(&xv);
    gr_session_free(s);
    gr_graph_free(g);
  }
}

static void test_cancel_pending_async(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output blocked = gr_op(g, "test_block", "waits_forever", &x, 1, NULL, 0);
  /* the failure comes 5 ms later, from another thread, after `blocked` started */
  gr_attr a = gr_attr_int("micros", 5000);
  gr_output later = gr_op(g, "test_async_delay", NULL, &x, 1, &a, 1);
  gr_output failing = gr_op(g, "test_fail", "breaks", &later, 1, NULL, 0);
  gr_output sum = gr_add(g, blocked, failing);
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  gr_tensor xv = gr_tensor_scalar_f32(1), out;
  gr_feed f = {x, &xv};
  gt_block_reset();
  /* without cancellation this would hang */
  GR_CHECK(gr_session_run(s, &f, 1, &sum, 1, &out, NULL, 0, &err) == GR_ERR_ABORTED);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'breaks'");
  GR_CHECK_STR_CONTAINS(err.msg, "failed on purpose");
  GR_CHECK_EQ_INT(gt_block_started(), 1);
  gr_tensor_release(&xv);
  gr_session_free(s);
  gr_graph_free(g);
}

static double wide_run_seconds(int threads, int *max_par) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output outs[4];
  for (int i = 0; i < 4; i++) outs[i] = gr_op(g, "test_busy", NULL, &x, 1, NULL, 0);
  gr_output all = gr_add_n(g, outs, 4);
  gr_error err;
  gr_session_options o = {.inter_op_threads = threads};
  gr_session *s = gr_session_new(g, &o, &err);
  gr_tensor xv = gr_tensor_scalar_f32(1), out;
  gr_feed f = {x, &xv};
  gt_gauge_reset();
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  GR_CHECK_OK(gr_session_run(s, &f, 1, &all, 1, &out, NULL, 0, &err), err);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  GR_CHECK_NEAR(gr_tensor_get_f64(&out, 0), 4, 0);
  gr_tensor_release(&out);
  gr_tensor_release(&xv);
  gr_session_free(s);
  gr_graph_free(g);
  *max_par = gt_gauge_max();
  return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

static void test_inter_op_parallelism(void) {
  /* sleeping nodes: overlap is a property of scheduling, not of machine speed */
  int par1, par4;
  wide_run_seconds(1, &par1);
  wide_run_seconds(4, &par4);
  GR_CHECK_EQ_INT(par1, 1);
  GR_CHECK_MSG(par4 >= 2, "at most %d of 4 independent nodes ran at once on 4 threads", par4);
}

/* Random DAGs of scalar f32 ops, checked against direct evaluation in float. */
static void test_random_dags(void) {
  gt_rng r = {12345};
  for (int trial = 0; trial < 40; trial++) {
    int n = (int)gt_int(&r, 1, 120);
    gr_graph *g = gr_graph_new();
    gr_output *nodes = malloc(sizeof(gr_output) * (size_t)(n + 2));
    float *val = malloc(sizeof(float) * (size_t)(n + 2));
    nodes[0] = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
    val[0] = 0.75f;
    for (int i = 1; i <= n; i++) {
      int a = (int)gt_int(&r, 0, i - 1), b = (int)gt_int(&r, 0, i - 1);
      switch (gt_int(&r, 0, 4)) {
        case 0:
          nodes[i] = gr_add(g, nodes[a], nodes[b]);
          val[i] = val[a] + val[b];
          break;
        case 1:
          nodes[i] = gr_sub(g, nodes[a], nodes[b]);
          val[i] = val[a] - val[b];
          break;
        case 2:
          nodes[i] = gr_mul(g, nodes[a], nodes[b]);
          val[i] = val[a] * val[b];
          break;
        case 3:
          nodes[i] = gr_maximum(g, nodes[a], nodes[b]);
          val[i] = val[a] > val[b] ? val[a] : val[b];
          break;
        default: {
          float c = (float)gt_uniform(&r, -1, 1);
          nodes[i] = gr_mul(g, nodes[a], gr_const_f32(g, c));
          val[i] = val[a] * c;
        }
      }
    }
    int nf = (int)gt_int(&r, 1, 5);
    gr_output fetch[5];
    int idx[5];
    for (int k = 0; k < nf; k++) {
      idx[k] = (int)gt_int(&r, 1, n);
      fetch[k] = nodes[idx[k]];
    }
    gr_error err;
    GR_CHECK(gr_graph_error(g) == NULL);
    for (int threads = 1; threads <= 3; threads += 2) {
      gr_session_options o = {.inter_op_threads = threads};
      gr_session *s = gr_session_new(g, &o, &err);
      gr_tensor xv = gr_tensor_scalar_f32(val[0]), out[5];
      gr_feed f = {nodes[0], &xv};
      GR_CHECK_OK(gr_session_run(s, &f, 1, fetch, nf, out, NULL, 0, &err), err);
      for (int k = 0; k < nf; k++) {
        float got = *(float *)gr_tensor_data(&out[k]);
        GR_CHECK_MSG(memcmp(&got, &val[idx[k]], 4) == 0, "trial %d node %d: %g vs %g", trial,
                     idx[k], got, val[idx[k]]);
        gr_tensor_release(&out[k]);
      }
      gr_tensor_release(&xv);
      gr_session_free(s);
    }
    free(nodes);
    free(val);
    gr_graph_free(g);
  }
}

static void test_steady_state_allocates_nothing(void) {
  gr_buffer_pool_set_limit((size_t)1 << 30); /* the pool is off by default under ASan */
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){2, {32, 32}});
  gr_output h = x;
  for (int i = 0; i < 10; i++) h = gr_tanh(g, gr_add(g, gr_matmul(g, h, x, false, false), x));
  gr_error err;
  gr_session *s = gr_session_new(g, NULL, &err);
  gt_rng r = {7};
  gr_tensor xv = gt_random(&r, GR_F32, (gr_shape){2, {32, 32}}, -0.1, 0.1), out;
  gr_feed f = {x, &xv};
  for (int i = 0; i < 5; i++) {
    GR_CHECK_OK(gr_session_run(s, &f, 1, &h, 1, &out, NULL, 0, &err), err);
    gr_tensor_release(&out);
  }
  gr_buffer_pool_stats before, after;
  gr_buffer_pool_get_stats(&before);
  for (int i = 0; i < 50; i++) {
    GR_CHECK_OK(gr_session_run(s, &f, 1, &h, 1, &out, NULL, 0, &err), err);
    gr_tensor_release(&out);
  }
  gr_buffer_pool_get_stats(&after);
  GR_CHECK_EQ_INT(after.system_allocs, before.system_allocs);
  gr_tensor_release(&xv);
  gr_session_free(s);
  gr_graph_free(g);
}

/* On one thread, ready cheap nodes run before a ready expensive one: a
 * cheap node is often a send another device waits for. x feeds a chain of
 * three negs (made first) and an expensive node (made second, so the plain
 * last-in-first-out order would run it first). */
static void test_cheap_before_expensive(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output c = gr_neg(g, gr_neg(g, gr_neg(g, x)));
  gr_output b = gr_op(g, "test_busy", "busy", &x, 1, NULL, 0);
  gr_session_options o = {.inter_op_threads = 1, .intra_op_threads = 1};
  gr_error err;
  gr_session *s = gr_session_new(g, &o, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  gr_step_trace *t = gr_step_trace_new();
  gr_tensor xv = gr_tensor_scalar_f32(2), out[2];
  gr_feed f = {x, &xv};
  if (s && t &&
      gr_session_run_traced(s, &f, 1, (gr_output[]){c, b}, 2, out, NULL, 0, t, &err) == GR_OK) {
    int64_t busy_start = -1, last_neg_start = -1;
    for (int i = 0; i < gr_step_trace_count(t); i++) {
      const gr_trace_event *e = gr_step_trace_event(t, i);
      if (e->node == b.node) busy_start = e->start_ns;
      if (e->node == c.node) last_neg_start = e->start_ns;
    }
    GR_CHECK(busy_start >= 0 && last_neg_start >= 0);
    GR_CHECK_MSG(last_neg_start < busy_start, "the cheap chain ran after the expensive node");
    GR_CHECK_NEAR(gr_tensor_get_f64(&out[0], 0), -2, 0);
    gr_tensor_release(&out[0]);
    gr_tensor_release(&out[1]);
  } else {
    GR_CHECK_MSG(false, "run failed: %s", err.msg);
  }
  gr_tensor_release(&xv);
  gr_step_trace_free(t);
  gr_session_free(s);
  gr_graph_free(g);
}

int main(void) {
  register_test_ops();
  GR_RUN(test_cheap_before_expensive);
  GR_RUN(test_async_chain);
  GR_RUN(test_cancel_pending_async);
  GR_RUN(test_inter_op_parallelism);
  GR_RUN(test_random_dags);
  GR_RUN(test_steady_state_allocates_nothing);
  return gr_test_finish();
}
