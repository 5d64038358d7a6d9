/* A server task holds no thread per running step: 40 concurrent steps (more
 * than the 16 threads that used to run steps) each wait in a dequeue on the
 * task's queue, and a 41st step fills the queue, which ends them all. Before
 * steps ran asynchronously, the filling step queued behind the waiting
 * ones and nothing moved until the step timeout. Bounded by the master's
 * step timeout. */
#include <graphrun.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_util.h"

#define SECRET "dist-steps-test-secret"

enum { STEPS = 40 };

typedef struct waiter {
  pthread_t t;
  gr_session *s;
  gr_output deq;
  gr_status st;
  gr_error err;
  float got;
} waiter;

static void *wait_main(void *arg) {
  waiter *w = arg;
  gr_tensor out;
  w->st = gr_session_run(w->s, NULL, 0, &w->deq, 1, &out, NULL, 0, &w->err);
  if (w->st == GR_OK) {
    w->got = (float)gr_tensor_get_f64(&out, 0);
    gr_tensor_release(&out);
  }
  return NULL;
}

static void test_more_steps_than_threads(void) {
  gr_error err;
  gr_server *srv = NULL;
  gr_server_options so = {
      .job = "worker", .task = 0, .secret = SECRET, .inter_op_threads = 2, .quiet = true};
  GR_CHECK_OK(gr_server_new(&so, &srv, &err), err);
  if (!srv) return;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gr_server_port(srv));
  const char *addrs[1] = {addr};
  gr_master *m = NULL;
  gr_master_options mo = {
      .num_tasks = 1, .addresses = addrs, .secret = SECRET, .step_timeout_ms = 20000};
  GR_CHECK_OK(gr_master_new(&mo, &m, &err), err);
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_output q = gr_fifo_queue(g, "q", 1, (gr_dtype[]){GR_F32}, (gr_shape[]){gr_shape_scalar()}, -1);
  gr_output deq;
  gr_queue_dequeue(g, q, &deq);
  gr_output xs = gr_placeholder(g, "xs", GR_F32, gr_shape_make(1, (int64_t[]){-1}));
  gr_output enq = gr_queue_enqueue_many(g, q, &xs, 1);
  gr_output close = gr_queue_close(g, q, true);
  gr_graph_pop_device_scope(g);
  GR_CHECK_MSG(!gr_graph_error(g), "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
  gr_session *s = m ? gr_master_session_new(m, g, NULL, &err) : NULL;
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  if (s) {
    waiter w[STEPS];
    for (int i = 0; i < STEPS; i++) {
      w[i] = (waiter){.s = s, .deq = deq};
      pthread_create(&w[i].t, NULL, wait_main, &w[i]);
    }
    usleep(300000); /* most dequeues wait on the task now */
    gr_tensor xv;
    GR_CHECK_OK(gr_tensor_alloc(&xv, GR_F32, &(gr_shape){1, {STEPS}}, &err), err);
    for (int i = 0; i < STEPS; i++) ((float *)gr_tensor_data(&xv))[i] = (float)i;
    gr_feed f = {xs, &xv};
    GR_CHECK_OK(gr_session_run(s, &f, 1, NULL, 0, NULL, &enq, 1, &err), err);
    gr_tensor_release(&xv);
    /* a failure above leaves dequeues waiting: closing the queue ends them */
    GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &close, 1, &err), err);
    bool seen[STEPS] = {false};
    for (int i = 0; i < STEPS; i++) {
      pthread_join(w[i].t, NULL);
      GR_CHECK_OK(w[i].st, w[i].err);
      int k = (int)w[i].got;
      if (w[i].st == GR_OK && k >= 0 && k < STEPS) {
        GR_CHECK_MSG(!seen[k], "value %d dequeued twice", k);
        seen[k] = true;
      }
    }
    gr_session_free(s);
  }
  gr_graph_free(g);
  gr_master_free(m);
  gr_server_free(srv);
}

int main(void) {
  gr_init();
  GR_RUN(test_more_steps_than_threads);
  return gr_test_finish();
}
