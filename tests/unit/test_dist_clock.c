/* The master's waits and a step of the wall clock: every deadline is on
 * CLOCK_MONOTONIC (docs/distributed.md, "Failures and recovery"), so a
 * wall clock set back (NTP, an operator) neither stalls a step timeout nor
 * fires it.
 *
 * How: this program is linked with -Wl,--wrap=clock_gettime (see
 * tests/unit/CMakeLists.txt), so the engine's calls of clock_gettime go
 * through __wrap_clock_gettime below, which reads CLOCK_REALTIME an hour
 * ahead while the test says so: a deadline taken from it lands an hour
 * after the kernel's own wall clock reaches it, exactly as if the wall
 * clock had been set back an hour once the deadline was computed. The
 * master's step timeout (300 ms) must still fail a step that waits forever
 * (a dequeue from an empty queue), within the test's bound of 60 s (before
 * the fix it waited an hour). A forward step (the clock read an hour late)
 * must not end the step early. */
#include <graphrun.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "gr_test.h"

/* every server and client here shares one secret and cluster id */
#define SECRET  "clock-test-secret-0123456789abcdef"
#define CLUSTER "clock-test"

int __real_clock_gettime(clockid_t id, struct timespec *ts);

static atomic_long realtime_shift_s; /* added to what CLOCK_REALTIME reads */

int __wrap_clock_gettime(clockid_t id, struct timespec *ts) {
  int r = __real_clock_gettime(id, ts);
  if (r == 0 && id == CLOCK_REALTIME) ts->tv_sec += atomic_load(&realtime_shift_s);
  return r;
}

static double now_s(void) {
  struct timespec ts;
  __real_clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct step {
  gr_session *s;
  gr_output fetch;
  gr_status st;
  gr_error err;
} step;

static void *step_main(void *arg) {
  step *x = arg;
  gr_tensor out;
  x->st = gr_session_run(x->s, NULL, 0, &x->fetch, 1, &out, NULL, 0, &x->err);
  if (x->st == GR_OK) gr_tensor_release(&out);
  return NULL;
}

/* A step that waits forever, with the master's step timeout of 300 ms,
 * while CLOCK_REALTIME reads shift_s seconds off: it fails with the
 * timeout, not before 300 ms, within 60 s (the process exits if not: the
 * step's thread still holds the session). */
static void timeout_with_clock_shift(long shift_s) {
  gr_error err;
  gr_server *srv = NULL;
  gr_server_options so = {.job = "worker",
                          .secret = SECRET,
                          .cluster_id = CLUSTER,
                          .task = 0,
                          .inter_op_threads = 1,
                          .quiet = true};
  GR_CHECK_OK(gr_server_new(&so, &srv, &err), err);
  if (!srv) return;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gr_server_port(srv));
  const char *addrs[] = {addr};
  gr_master_options mo = {.secret = SECRET,
                          .cluster_id = CLUSTER,
                          .num_tasks = 1,
                          .addresses = addrs,
                          .step_timeout_ms = 300};
  gr_master *m = NULL;
  GR_CHECK_OK(gr_master_new(&mo, &m, &err), err);
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_output q = gr_fifo_queue(g, "q", 1, (gr_dtype[]){GR_F32}, (gr_shape[]){gr_shape_scalar()}, -1);
  step x = {.st = GR_OK};
  gr_queue_dequeue(g, q, &x.fetch);
  gr_graph_pop_device_scope(g);
  x.s = m ? gr_master_session_new(m, g, NULL, &err) : NULL;
  GR_CHECK_MSG(x.s != NULL, "%s", err.msg);
  if (x.s) {
    atomic_store(&realtime_shift_s, shift_s);
    double t0 = now_s();
    pthread_t t;
    pthread_create(&t, NULL, step_main, &x);
    struct timespec until;
    __real_clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    if (pthread_timedjoin_np(t, NULL, &until) != 0) {
      fprintf(stderr,
              "FAILED: with the wall clock %+ld s off, a step timeout of 300 ms did not "
              "end the step within 60 s\n",
              shift_s);
      fflush(NULL);
      _exit(1);
    }
    double took = now_s() - t0;
    atomic_store(&realtime_shift_s, 0);
    GR_CHECK_EQ_INT(x.st, GR_ERR_DEADLINE_EXCEEDED);
    GR_CHECK_STR_CONTAINS(x.err.msg, "did not answer before the deadline (300 ms for a step)");
    /* the deadline is kept in whole milliseconds: it may fire up to 1 ms
     * before 300 ms measured here from an earlier start */
    GR_CHECK_MSG(took >= 0.298, "the step ended after %.3f s, before its timeout", took);
    printf("wall clock %+ld s: the step timed out after %.3f s\n", shift_s, took);
  }
  gr_session_free(x.s);
  gr_graph_free(g);
  gr_master_free(m);
  gr_server_free(srv);
}

static void test_clock_set_back(void) {
  timeout_with_clock_shift(3600);
}

static void test_clock_set_forward(void) {
  timeout_with_clock_shift(-3600);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  gr_init();
  GR_RUN(test_clock_set_back);
  GR_RUN(test_clock_set_forward);
  return gr_test_finish();
}
