/* A small RUN is started on the server's network thread, where it arrived
 * (no hand-off to a work thread: a futex wake-up and a context switch per
 * task per step); a RUN whose frame is over GR_SERVER_INLINE_RUN_BYTES (its
 * feeds are copied while it is checked) still goes to a work thread, so the
 * network thread never copies large feeds. A probe kernel (light: a scalar)
 * records the name of the thread that ran it. Failures of a step started
 * inline are still answered with the named error. */
#include <graphrun.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "test_util.h"

#define SECRET "dist-inline-run-test-secret"

static pthread_mutex_t probe_mu = PTHREAD_MUTEX_INITIALIZER;
static char probe_thread[32]; /* under probe_mu */

static gr_status probe_kernel(gr_kernel_ctx *ctx) {
  char name[32] = "";
  pthread_getname_np(pthread_self(), name, sizeof name);
  pthread_mutex_lock(&probe_mu);
  snprintf(probe_thread, sizeof probe_thread, "%s", name);
  pthread_mutex_unlock(&probe_mu);
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}
static const gr_op_def test_probe =
    GT_UNARY_OP_DEF("test_thread_probe", probe_kernel, NULL, 0, GR_OP_STATEFUL);

static gr_status fail_kernel(gr_kernel_ctx *ctx) {
  return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "test_fail: failed on purpose");
}
static const gr_op_def test_fail = GT_UNARY_OP_DEF("test_inline_fail", fail_kernel, NULL, 0, 0);

static void probed(char *out, size_t cap) {
  pthread_mutex_lock(&probe_mu);
  snprintf(out, cap, "%s", probe_thread);
  probe_thread[0] = '\0';
  pthread_mutex_unlock(&probe_mu);
}

static void test_small_inline_large_pooled(void) {
  gr_error err;
  gr_op_registry_add(&test_probe, &err);
  gr_op_registry_add(&test_fail, &err);
  gr_server *srv = NULL;
  gr_server_options so = {
      .job = "worker", .task = 0, .secret = SECRET, .inter_op_threads = 1, .quiet = true};
  GR_CHECK_OK(gr_server_new(&so, &srv, &err), err);
  if (!srv) return;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gr_server_port(srv));
  const char *addrs[1] = {addr};
  gr_master *m = NULL;
  gr_master_options mo = {
      .num_tasks = 1, .addresses = addrs, .secret = SECRET, .step_timeout_ms = 60000};
  GR_CHECK_OK(gr_master_new(&mo, &m, &err), err);
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_output probe =
      gr_op(g, "test_thread_probe", "probe", (gr_output[]){gr_const_f32(g, 3)}, 1, NULL, 0);
  gr_output xs = gr_placeholder(g, "xs", GR_F32, gr_shape_make(1, (int64_t[]){-1}));
  gr_output sum = gr_reduce_sum(g, xs, NULL, 0, false);
  gr_output bad =
      gr_op(g, "test_inline_fail", "bad", (gr_output[]){gr_const_f32(g, 1)}, 1, NULL, 0);
  gr_graph_pop_device_scope(g);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  gr_session *s = m ? gr_master_session_new(m, g, NULL, &err) : NULL;
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  char name[32];
  for (int i = 0; s && i < 3; i++) { /* a small RUN: no feeds */
    gr_tensor out;
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &probe, 1, &out, NULL, 0, &err), err);
    GR_CHECK_EQ_INT((int)gr_tensor_get_f64(&out, 0), 3);
    gr_tensor_release(&out);
    probed(name, sizeof name);
    GR_CHECK_MSG(!strcmp(name, "gr-net"), "a small RUN ran on '%s'", name);
  }
  if (s) { /* a RUN of 1 MiB of feeds: checked and started on a work thread */
    gr_tensor xv;
    enum { N = 1 << 18 };
    GR_CHECK_OK(gr_tensor_alloc(&xv, GR_F32, &(gr_shape){1, {N}}, &err), err);
    for (int i = 0; i < N; i++) ((float *)gr_tensor_data(&xv))[i] = 1;
    gr_feed f = {xs, &xv};
    gr_output fetch[2] = {probe, sum};
    gr_tensor out[2];
    GR_CHECK_OK(gr_session_run(s, &f, 1, fetch, 2, out, NULL, 0, &err), err);
    GR_CHECK_EQ_INT((int)gr_tensor_get_f64(&out[1], 0), N);
    gr_tensor_release(&out[0]);
    gr_tensor_release(&out[1]);
    gr_tensor_release(&xv);
    probed(name, sizeof name);
    GR_CHECK_MSG(!strcmp(name, "gr-work"), "a 1 MiB RUN ran on '%s'", name);
  }
  if (s) { /* a kernel failing in a step started inline: the step fails, naming it */
    gr_tensor out;
    gr_status st = gr_session_run(s, NULL, 0, &bad, 1, &out, NULL, 0, &err);
    GR_CHECK_EQ_INT(st, GR_ERR_INVALID_ARGUMENT);
    if (st != GR_OK) {
      GR_CHECK_STR_CONTAINS(err.msg, "test_fail: failed on purpose");
      GR_CHECK_STR_CONTAINS(err.msg, "bad");
    }
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &probe, 1, &out, NULL, 0, &err), err);
    gr_tensor_release(&out); /* the task runs steps after the failure */
  }
  gr_session_free(s);
  gr_graph_free(g);
  gr_master_free(m);
  gr_server_free(srv);
}

int main(void) {
  gr_init();
  GR_RUN(test_small_inline_large_pooled);
  return gr_test_finish();
}
