/* The step timeout (gr_session_options.step_timeout_ms): a step that
 * genuinely deadlocks -- an async kernel that never completes, a _recv whose
 * _send never runs, two devices each waiting for the other -- fails with
 * GR_ERR_DEADLINE_EXCEEDED naming the waiting nodes and their devices, on
 * the static and the control-flow run paths; a step that keeps computing for
 * longer than the timeout is not cut off; the session stays usable. */
#include <graphrun.h>
#include <time.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_proc.h"
#include "test_util.h"

/* An async kernel that never completes on its own: only cancellation ends it. */
static const gr_op_def test_block =
    GT_UNARY_OP_DEF("test_block", gt_block_kernel, NULL, 0, GR_OP_ASYNC | GR_OP_STATEFUL);

/* A synchronous kernel that computes (sleeps) for attr "millis". */
static gr_status sleep_kernel(gr_kernel_ctx *ctx) {
  usleep((useconds_t)gr_node_attr_int(ctx->node, "millis", 0) * 1000);
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}
static const gr_attr_spec sleep_attrs[] = {
    {"millis", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = 0}}};
static const gr_op_def test_sleep =
    GT_UNARY_OP_DEF("test_sleep", sleep_kernel, sleep_attrs, 1, GR_OP_STATEFUL);

static gr_status fail_kernel(gr_kernel_ctx *ctx) {
  return gr_kernel_error(ctx, GR_ERR_OUT_OF_RANGE, "failed on purpose");
}
static const gr_op_def test_fail =
    GT_UNARY_OP_DEF("test_fail", fail_kernel, NULL, 0, GR_OP_STATEFUL);

static gr_session *session(gr_graph *g, int devices, int threads, int timeout_ms) {
  gr_session_options o = {
      .num_devices = devices, .inter_op_threads = threads, .step_timeout_ms = timeout_ms};
  gr_error err;
  gr_session *s = gr_session_new(g, &o, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  return s;
}

/* Runs fetch; returns the status, the message in err and the seconds taken.
 * The upper bounds the cases put on those seconds (20 s) only end a hang:
 * they hold on a busy 2-core machine and under ASan. What a case proves
 * is in the error: the watchdog's message naming the waiting nodes, or a
 * kernel's own error where only the (longer) timeout would give another. */
static gr_status run1(gr_session *s, gr_output fetch, gr_error *err, double *secs) {
  gr_tensor out;
  double t0 = gt_now();
  gr_status st = gr_session_run(s, NULL, 0, &fetch, 1, &out, NULL, 0, err);
  *secs = gt_now() - t0;
  if (st == GR_OK) gr_tensor_release(&out);
  return st;
}

static gr_output recv_from(gr_graph *g, const char *name, const char *tensor, int from, int to) {
  gr_attr a[5] = {gr_attr_string("tensor_name", tensor),
                  gr_attr_string("send_device", gt_device_name(from)),
                  gr_attr_string("recv_device", gt_device_name(to)), gr_attr_dtype("dtype", GR_F32),
                  gr_attr_shape("shape", gr_shape_scalar())};
  return gr_op(g, "_recv", name, NULL, 0, a, 5);
}

static gr_output send_to(gr_graph *g, const char *name, gr_output x, const char *tensor, int from,
                         int to) {
  gr_attr a[3] = {gr_attr_string("tensor_name", tensor),
                  gr_attr_string("send_device", gt_device_name(from)),
                  gr_attr_string("recv_device", gt_device_name(to))};
  return gr_op(g, "_send", name, &x, 1, a, 3);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_blocked_async_kernel(void) {
  for (int threads = 1; threads <= 2; threads++) {
    gr_graph *g = gr_graph_new();
    gr_output x = gr_const_f32(g, 1);
    gr_output b = gr_op(g, "test_block", "blocker", &x, 1, NULL, 0);
    gr_output y = gr_name(g, gr_add(g, b, x), "y");
    gr_output ok = gr_name(g, gr_mul(g, x, gr_const_f32(g, 3)), "ok");
    gr_session *s = session(g, 1, threads, 200);
    gr_error err;
    double secs;
    GR_CHECK(run1(s, y, &err, &secs) == GR_ERR_DEADLINE_EXCEEDED);
    GR_CHECK_STR_CONTAINS(err.msg, "no progress for 0.2 s");
    GR_CHECK_STR_CONTAINS(err.msg, "still pending: 'blocker' (op test_block) on "
                                   "/job:localhost/replica:0/task:0/device:CPU:0");
    GR_CHECK_MSG(secs >= 0.19 && secs < 20, "took %.2f s", secs);
    /* the session goes on: another signature runs, the blocked one fails again */
    GR_CHECK_OK(run1(s, ok, &err, &secs), err);
    GR_CHECK(run1(s, y, &err, &secs) == GR_ERR_DEADLINE_EXCEEDED);
    gr_session_free(s);
    gr_graph_free(g);
  }
}

/* A _recv on CPU:0 whose _send (from CPU:1) is never built: the step waits on it. */
static void test_recv_without_send(void) {
  gr_graph *g = gr_graph_new();
  gt_pin(g, 0);
  gr_output x = recv_from(g, "lonely_recv", "x:0", 1, 0);
  gr_graph_pop_device_scope(g);
  gt_pin(g, 1);
  gr_output z = gr_add(g, gr_const_f32(g, 1), gr_const_f32(g, 2));
  gr_graph_pop_device_scope(g);
  gr_output y = gr_name(g, gr_add(g, x, z), "y"); /* on CPU:0: the step spans two devices */
  gr_session *s = session(g, 2, 2, 250);
  gr_error err;
  double secs;
  GR_CHECK(run1(s, y, &err, &secs) == GR_ERR_DEADLINE_EXCEEDED);
  GR_CHECK_STR_CONTAINS(err.msg, "no progress for 0.25 s");
  GR_CHECK_STR_CONTAINS(err.msg, "'lonely_recv' on /job:localhost/replica:0/task:0/device:CPU:0 "
                                 "(waiting for 'x:0' from "
                                 "/job:localhost/replica:0/task:0/device:CPU:1)");
  GR_CHECK_MSG(secs < 20, "took %.2f s", secs);
  gr_session_free(s);
  gr_graph_free(g);
}

/* Each device receives before it sends what the other one waits for. */
static void test_cross_device_cycle(void) {
  gr_graph *g = gr_graph_new();
  gt_pin(g, 0);
  gr_output a = recv_from(g, "recv_a", "b_value", 1, 0);
  gr_output t[2];
  t[0] = send_to(g, "send_a", gr_add(g, a, gr_const_f32(g, 1)), "a_value", 0, 1);
  gr_graph_pop_device_scope(g);
  gt_pin(g, 1);
  gr_output b = recv_from(g, "recv_b", "a_value", 0, 1);
  t[1] = send_to(g, "send_b", gr_mul(g, b, gr_const_f32(g, 2)), "b_value", 1, 0);
  gr_graph_pop_device_scope(g);
  gt_pin(g, 0);
  gr_output y = gr_name(g, gr_identity(g, a), "y");
  gr_graph_pop_device_scope(g);
  gr_session *s = session(g, 2, 2, 200);
  gr_error err;
  gr_tensor out;
  GR_CHECK(gr_session_run(s, NULL, 0, &y, 1, &out, t, 2, &err) == GR_ERR_DEADLINE_EXCEEDED);
  GR_CHECK_STR_CONTAINS(err.msg, "'recv_a' on /job:localhost/replica:0/task:0/device:CPU:0");
  GR_CHECK_STR_CONTAINS(err.msg, "'recv_b' on /job:localhost/replica:0/task:0/device:CPU:1 "
                                 "(waiting for 'a_value' from "
                                 "/job:localhost/replica:0/task:0/device:CPU:0)");
  GR_CHECK(out.buf == NULL);
  gr_session_free(s);
  gr_graph_free(g);
}

/* A kernel error on one device while the other device waits on a kernel that
 * nothing cancels: the step stalls after the error, and the error reported is
 * the kernel's (the cause), not the stall. */
static void test_error_then_stall(void) {
  gr_graph *g = gr_graph_new();
  gt_pin(g, 0);
  gr_output x = gr_const_f32(g, 1);
  gr_output bad = gr_op(g, "test_fail", "bad", &x, 1, NULL, 0);
  gr_graph_pop_device_scope(g);
  gt_pin(g, 1);
  gr_output y = gr_const_f32(g, 2);
  gr_output b = gr_op(g, "test_block", "waits", &y, 1, NULL, 0);
  gr_graph_pop_device_scope(g);
  gr_output t[2] = {bad, b};
  gr_session *s = session(g, 2, 2, 200);
  gr_error err;
  GR_CHECK(gr_session_run(s, NULL, 0, NULL, 0, NULL, t, 2, &err) == GR_ERR_OUT_OF_RANGE);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'bad' (op test_fail): failed on purpose");
  gr_session_free(s);
  gr_graph_free(g);
}

/* ---- a blocking kernel inside a loop: the control-flow run path */
static gr_output loop_cond(gr_graph *g, void *a, const gr_output *v) {
  (void)a;
  return gr_less(g, v[0], gr_const_f32(g, 3));
}
static void block_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  (void)a;
  gr_output b = gr_op(g, "test_block", "loop_blocker", v, 1, NULL, 0);
  next[0] = gr_add(g, b, gr_const_f32(g, 1));
}
static void sleep_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  gr_attr ms = gr_attr_int("millis", *(int *)a);
  next[0] = gr_add(g, gr_op(g, "test_sleep", NULL, v, 1, &ms, 1), gr_const_f32(g, 1));
}

static void fail_on_cpu1_body(gr_graph *g, void *a, const gr_output *v, gr_output *next) {
  (void)a;
  gt_pin(g, 1);
  gr_output f = gr_op(g, "test_fail", "fails", v, 1, NULL, 0);
  gr_graph_pop_device_scope(g);
  next[0] = gr_add(g, f, gr_const_f32(g, 1));
}

/* Runs the loop `while (v < 3) v = body(v)` from v = 0 on `devices` devices
 * with a step timeout of timeout_ms; returns the status, the message in
 * err and the seconds taken. */
static gr_status run_loop(gr_loop_body_fn body, int devices, int timeout_ms, gr_error *err,
                          double *secs) {
  gr_graph *g = gr_graph_new();
  gr_output v[1] = {gr_const_f32(g, 0)};
  GR_CHECK(gr_while_loop(g, loop_cond, body, NULL, 1, v, 0) == GR_OK);
  gr_session *s = session(g, devices, 2, timeout_ms);
  gr_status st = run1(s, v[0], err, secs);
  gr_session_free(s);
  gr_graph_free(g);
  return st;
}

/* A kernel error inside a loop split over two devices stops the other
 * device's receives at once (it used to leave them waiting for ever). */
static void test_loop_error_on_two_devices(void) {
  gr_error err;
  double secs;
  GR_CHECK(run_loop(fail_on_cpu1_body, 2, 30000, &err, &secs) == GR_ERR_OUT_OF_RANGE);
  GR_CHECK_STR_CONTAINS(err.msg, "fails' (op test_fail) in loop ");
  GR_CHECK_MSG(secs < 20, "took %.2f s", secs);
}

static void test_blocked_in_loop(void) {
  gr_error err;
  double secs;
  GR_CHECK(run_loop(block_body, 1, 200, &err, &secs) == GR_ERR_DEADLINE_EXCEEDED);
  GR_CHECK_STR_CONTAINS(err.msg, "loop_blocker' (op test_block) on ");
  GR_CHECK_STR_CONTAINS(err.msg, "iteration 0 (its asynchronous kernel has not completed)");
  GR_CHECK_MSG(secs < 20, "took %.2f s", secs);
}

/* Kernels that compute for longer than the timeout are progress: neither one
 * long kernel nor a loop whose whole run is longer is cut off. */
static void test_long_steps_finish(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_const_f32(g, 5);
  gr_attr ms = gr_attr_int("millis", 400);
  gr_output slow = gr_op(g, "test_sleep", "slow", &x, 1, &ms, 1);
  int iter_ms = 40;
  gr_output v[1] = {gr_const_f32(g, 0)};
  GR_CHECK(gr_while_loop(g, loop_cond, sleep_body, &iter_ms, 1, v, 0) == GR_OK);
  for (int devices = 1; devices <= 2; devices++)
    for (int threads = 1; threads <= 2; threads++) {
      gr_session *s = session(g, devices, threads, 100);
      gr_error err;
      double secs;
      GR_CHECK_OK(run1(s, slow, &err, &secs), err);
      GR_CHECK_MSG(secs >= 0.39, "took %.2f s", secs);
      GR_CHECK_OK(run1(s, v[0], &err, &secs), err);
      gr_session_free(s);
    }
  gr_graph_free(g);
}

static void test_bad_option(void) {
  gr_graph *g = gr_graph_new();
  gr_session_options o = {.step_timeout_ms = -1};
  gr_error err;
  GR_CHECK(gr_session_new(g, &o, &err) == NULL);
  GR_CHECK_STR_CONTAINS(err.msg, "step_timeout_ms");
  gr_graph_free(g);
}

int main(void) {
  gr_error err;
  gr_ops_register_all();
  GR_CHECK_OK(gr_op_registry_add(&test_block, &err), err);
  GR_CHECK_OK(gr_op_registry_add(&test_sleep, &err), err);
  GR_CHECK_OK(gr_op_registry_add(&test_fail, &err), err);
  GR_RUN(test_blocked_async_kernel);
  GR_RUN(test_recv_without_send);
  GR_RUN(test_cross_device_cycle);
  GR_RUN(test_error_then_stall);
  GR_RUN(test_blocked_in_loop);
  GR_RUN(test_loop_error_on_two_devices);
  GR_RUN(test_long_steps_finish);
  GR_RUN(test_bad_option);
  return gr_test_finish();
}
