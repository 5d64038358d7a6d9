/* The client and the server against what a peer or the cluster may do to
 * them (docs/distributed.md, "Failures and recovery", "Bad input on the
 * wire"):
 *
 * - a task (a fake, speaking the wire from this process) answers a RUN
 *   with a fetch index it was not asked for, with a fetch missing, or with
 *   a fetch twice: the master refuses the answer naming the task, writes
 *   nothing outside the caller's array and keeps no fetch it filled;
 * - 70 steps wait at once (more than the 64 the master used to list) when
 *   a task they used is lost: every one ends with the loss;
 * - a step waiting in a dequeue on a task ends when the master aborts it
 *   (another task's kernel failed), and when its server shuts down: the
 *   abort used to reach only the step's receives;
 * - a traced step whose answer is over the wire's limits is answered with
 *   an error saying so (it used to be dropped: the client waited forever).
 *
 * Every wait is bounded: a step that does not end fails the test (which
 * then exits at once, as the threads still hold what it would free). */
#include <graphrun.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "distributed/msg_internal.h"
#include "distributed/transport_internal.h"
#include "distributed/wire_internal.h"
#include "gr_test.h"
#include "test_util.h"

/* every server and client here shares one secret and cluster id */
#define SECRET  "robust-test-secret-0123456789abcdef"
#define CLUSTER "robust-test"

#define FAKE_TASK "/job:worker/replica:0/task:0"
#define WAIT_S    60 /* how long a step may take to end before the test fails */

/* ---- a fake task ------------------------------------------------------------ */

typedef enum { RUN_GOOD, RUN_BAD_INDEX, RUN_MISSING, RUN_TWICE } run_mode;

typedef struct fake {
  gr_loop *loop;
  gr_listener *ls;
  int port;
  run_mode mode;
} fake;

static gr_outmsg *answer(uint64_t id, uint32_t extra) {
  gr_outmsg *m = gr_outmsg_new(GR_MSG_RESPONSE, 2 + extra);
  if (!m) abort();
  gr_outmsg_u64(m, "id", id);
  gr_outmsg_u64(m, "code", 0);
  return m;
}

/* [[index, 42.0f]...] of a RUN's answer in f's mode. */
static void pack_fetches(fake *f, gr_outmsg *m) {
  static const int idx[][3] = {[RUN_GOOD] = {2, 0, 1},
                               [RUN_BAD_INDEX] = {1, 5},
                               [RUN_MISSING] = {1, 0},
                               [RUN_TWICE] = {2, 0, 0}};
  gr_tensor t = gr_tensor_scalar_f32(42);
  gr_outmsg_key(m, "fetches");
  msgpack_pack_array(gr_outmsg_packer(m), (size_t)idx[f->mode][0]);
  for (int i = 0; i < idx[f->mode][0]; i++) {
    msgpack_pack_array(gr_outmsg_packer(m), 2);
    msgpack_pack_int(gr_outmsg_packer(m), idx[f->mode][1 + i]);
    if (gr_outmsg_pack_tensor(m, &t, false, NULL) != GR_OK) abort();
  }
  gr_tensor_release(&t);
}

static void fake_on_message(void *arg, gr_conn *c, gr_inmsg *in) {
  fake *f = arg;
  uint64_t id;
  gr_outmsg *m = NULL;
  if (gr_msg_u64(&in->msg.root, "id", &id, NULL) == GR_OK) switch (in->h.type) {
      case GR_MSG_GET_STATUS: {
        const char *dev = FAKE_TASK "/device:CPU:0";
        m = gr_get_status_resp_pack(id, &(gr_get_status_resp){FAKE_TASK, 7, &dev, 1, 1, 1});
        break;
      }
      case GR_MSG_REGISTER:
        m = answer(id, 1);
        gr_outmsg_u64(m, "handle", 3);
        break;
      case GR_MSG_RUN:
        m = answer(id, 3);
        pack_fetches(f, m);
        gr_outmsg_i64(m, "sends", 0);
        gr_outmsg_i64(m, "bytes", 0);
        break;
      case GR_MSG_HEARTBEAT:
      case GR_MSG_DEREGISTER:
        m = answer(id, 0);
        break;
      default:
        break;
    }
  gr_inmsg_free(in);
  if (m) gr_conn_send(c, m, NULL);
}
static void fake_on_close(void *arg, gr_conn *c, const gr_error *why) {}

static bool fake_start(fake *f) {
  gr_error err;
  gr_conn_handler h = {fake_on_message, fake_on_close, f, NULL, NULL, NULL};
  bool ok = gr_loop_new(&f->loop, &err) == GR_OK &&
            gr_listener_new(f->loop, "127.0.0.1", 0, &(gr_conn_auth){SECRET, CLUSTER, NULL}, &h,
                            &f->ls, &f->port, &err) == GR_OK;
  GR_CHECK_MSG(ok, "%s", err.msg);
  return ok;
}

static void fake_stop(fake *f) {
  gr_listener_free(f->ls);
  gr_loop_free(f->loop);
}

/* A session on the fake task fetching x and, with two, y (both on it);
 * results[0..n) filled by one run in mode, status returned. */
static gr_status fake_run(fake *f, run_mode mode, int n, gr_tensor *results, gr_error *err) {
  f->mode = mode;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", f->port);
  const char *addrs[] = {addr};
  gr_master_options mo = {.secret = SECRET,
                          .cluster_id = CLUSTER,
                          .num_tasks = 1,
                          .addresses = addrs,
                          .step_timeout_ms = WAIT_S * 1000};
  gr_master *m = NULL;
  gr_status st = gr_master_new(&mo, &m, err);
  if (st != GR_OK) return st;
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_output xy[2] = {gr_const_f32(g, 1), gr_const_f32(g, 2)};
  gr_graph_pop_device_scope(g);
  gr_session *s = gr_master_session_new(m, g, NULL, err);
  st = s ? gr_session_run(s, NULL, 0, xy, n, results, NULL, 0, err) : err->code;
  gr_session_free(s);
  gr_graph_free(g);
  gr_master_free(m);
  return st;
}

/* An answer with fetch index 5 to a run of one fetch: refused, and the
 * caller's array is written only at index 0 (slot 5 keeps its canary). */
static void test_fetch_index_out_of_range(void) {
  fake f;
  if (!fake_start(&f)) return;
  gr_tensor out[8]; /* out[0] is the run's (it clears it); the others are canaries */
  out[0] = gr_tensor_empty();
  for (int i = 1; i < 8; i++) out[i] = gr_tensor_scalar_f32(-1);
  gr_tensor canary = out[5];
  gr_error err;
  gr_status st = fake_run(&f, RUN_BAD_INDEX, 1, out, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_OUT_OF_RANGE);
  GR_CHECK_STR_CONTAINS(err.msg, "a bad answer from " FAKE_TASK);
  GR_CHECK_STR_CONTAINS(err.msg, "fetch index is 5, not in [0, 0]");
  GR_CHECK(out[5].buf == canary.buf && gr_tensor_get_f64(&out[5], 0) == -1);
  GR_CHECK(gr_tensor_is_empty(&out[0]));
  for (int i = 1; i < 8; i++) gr_tensor_release(&out[i]);
  fake_stop(&f);
}

/* An answer without fetch 1, and one with fetch 0 twice: refused, and the
 * fetch already filled is released (LeakSanitizer checks it at exit). */
static void test_fetch_missing_or_twice(void) {
  fake f;
  if (!fake_start(&f)) return;
  gr_tensor out[2];
  gr_error err;
  gr_status st = fake_run(&f, RUN_MISSING, 2, out, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_INTERNAL);
  GR_CHECK_STR_CONTAINS(err.msg, "a bad answer from " FAKE_TASK ": fetch 1 produced no value");
  GR_CHECK(gr_tensor_is_empty(&out[0]) && gr_tensor_is_empty(&out[1]));
  st = fake_run(&f, RUN_TWICE, 2, out, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "a bad answer from " FAKE_TASK ": fetch 0 is given twice");
  GR_CHECK(gr_tensor_is_empty(&out[0]) && gr_tensor_is_empty(&out[1]));
  st = fake_run(&f, RUN_GOOD, 2, out, &err); /* the fake answers well too */
  GR_CHECK_OK(st, err);
  if (st == GR_OK) {
    GR_CHECK(gr_tensor_get_f64(&out[0], 0) == 42 && gr_tensor_get_f64(&out[1], 0) == 42);
    gr_tensor_release(&out[0]), gr_tensor_release(&out[1]);
  }
  fake_stop(&f);
}

/* ---- real tasks ---------------------------------------------------------------- */

static gr_server *server_on(int task) {
  gr_server_options so = {.job = "worker",
                          .secret = SECRET,
                          .cluster_id = CLUSTER,
                          .task = task,
                          .inter_op_threads = 1,
                          .quiet = true};
  gr_server *s = NULL;
  gr_error err;
  GR_CHECK_OK(gr_server_new(&so, &s, &err), err);
  return s;
}

static gr_master *master_on(gr_server *const *srv, int n, int step_timeout_ms) {
  char addr[4][64];
  const char *addrs[4];
  for (int i = 0; i < n; i++) {
    snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", gr_server_port(srv[i]));
    addrs[i] = addr[i];
  }
  gr_master_options mo = {.secret = SECRET,
                          .cluster_id = CLUSTER,
                          .num_tasks = n,
                          .addresses = addrs,
                          .step_timeout_ms = step_timeout_ms};
  gr_master *m = NULL;
  gr_error err;
  GR_CHECK_OK(gr_master_new(&mo, &m, &err), err);
  return m;
}

/* A step run on its own thread: fetch (optional) and target (optional). */
typedef struct step {
  pthread_t t;
  gr_session *s;
  gr_output fetch, target;
  gr_status st;
  gr_error err;
  bool done; /* atomic */
} step;

static void *step_main(void *arg) {
  step *x = arg;
  gr_tensor out;
  x->st = gr_session_run(x->s, NULL, 0, x->fetch.node ? &x->fetch : NULL, x->fetch.node ? 1 : 0,
                         &out, x->target.node ? &x->target : NULL, x->target.node ? 1 : 0, &x->err);
  if (x->st == GR_OK && x->fetch.node) gr_tensor_release(&out);
  __atomic_store_n(&x->done, true, __ATOMIC_RELEASE);
  return NULL;
}

/* Joins x within the deadline (seconds of CLOCK_REALTIME, as
 * pthread_timedjoin_np wants); a step that does not end fails the test
 * and ends the process. */
static void step_join(step *x, const struct timespec *deadline, const char *what) {
  if (pthread_timedjoin_np(x->t, NULL, deadline) != 0) {
    fprintf(stderr, "FAILED: %s did not end within %d s\n", what, WAIT_S);
    fflush(NULL);
    _exit(1);
  }
}

static struct timespec deadline_in(int s) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += s;
  return ts;
}

/* A queue on task 0 and the dequeue of a step (nothing is ever enqueued). */
static gr_output empty_queue_dequeue(gr_graph *g) {
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_output q = gr_fifo_queue(g, "q", 1, (gr_dtype[]){GR_F32}, (gr_shape[]){gr_shape_scalar()}, -1);
  gr_output deq = {NULL, 0};
  gr_queue_dequeue(g, q, &deq);
  gr_graph_pop_device_scope(g);
  return deq;
}

/* 70 steps wait on task 0's queue, each also using task 1, which answers
 * at once; task 1 is lost: every step ends with the loss (a lost task wakes
 * every waiting step, as many as there are). */
static void test_lost_task_wakes_every_step(void) {
  enum { STEPS = 70 };
  gr_server *srv[2] = {server_on(0), server_on(1)};
  gr_master *m = srv[0] && srv[1] ? master_on(srv, 2, 0) : NULL;
  if (!m) return;
  gr_graph *g = gr_graph_new();
  gr_output deq = empty_queue_dequeue(g);
  gr_graph_push_device_scope(g, "/job:worker/task:1");
  gr_output on1 = gr_identity(g, gr_const_f32(g, 1));
  gr_graph_pop_device_scope(g);
  gr_error err;
  gr_session *s = gr_master_session_new(m, g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  static step x[STEPS];
  for (int i = 0; s && i < STEPS; i++) {
    x[i] = (step){.s = s, .fetch = deq, .target = on1};
    pthread_create(&x[i].t, NULL, step_main, &x[i]);
  }
  usleep(500000); /* most steps wait on task 0 now (any that does not yet fails the same) */
  gr_server_free(srv[1]);
  struct timespec until = deadline_in(WAIT_S);
  int lost = 0;
  for (int i = 0; s && i < STEPS; i++) {
    step_join(&x[i], &until, "a step that used the lost task");
    lost +=
        x[i].st == GR_ERR_UNAVAILABLE && strstr(x[i].err.msg, "lost /job:worker/replica:0/task:1");
  }
  GR_CHECK_EQ_INT(lost, STEPS);
  if (lost != STEPS)
    for (int i = 0; i < STEPS; i++)
      if (x[i].st != GR_ERR_UNAVAILABLE) fprintf(stderr, "step %d: %s\n", i, x[i].err.msg);
  gr_session_free(s);
  gr_graph_free(g);
  gr_master_free(m); /* awaits task 0's answers to the aborted steps */
  gr_server_free(srv[0]);
}

/* fails on purpose (task 1's part of the step) */
static gr_status fail_kernel(gr_kernel_ctx *ctx) {
  return gr_kernel_error(ctx, GR_ERR_INVALID_ARGUMENT, "test_fail: failed on purpose");
}
static const gr_op_def test_fail = GT_UNARY_OP_DEF("test_fail", fail_kernel, NULL, 0, 0);

/* A step waits in a dequeue on task 0 while its kernel on task 1 fails:
 * the master aborts it on task 0, where the dequeue ends, and the step
 * fails with task 1's error (before, the abort failed only the step's
 * receives, task 0 never answered and the step ended at its timeout). */
static void test_abort_ends_a_dequeue(void) {
  gr_error err;
  gr_op_registry_add(&test_fail, &err);
  gr_server *srv[2] = {server_on(0), server_on(1)};
  gr_master *m = srv[0] && srv[1] ? master_on(srv, 2, WAIT_S * 1000) : NULL;
  if (!m) return;
  gr_graph *g = gr_graph_new();
  gr_output deq = empty_queue_dequeue(g);
  gr_graph_push_device_scope(g, "/job:worker/task:1");
  gr_output bad = gr_op(g, "test_fail", "bad", (gr_output[]){gr_const_f32(g, 1)}, 1, NULL, 0);
  gr_graph_pop_device_scope(g);
  gr_session *s = gr_master_session_new(m, g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  step x = {.s = s, .fetch = deq, .target = bad};
  if (s) {
    pthread_create(&x.t, NULL, step_main, &x);
    struct timespec until = deadline_in(WAIT_S + 30);
    step_join(&x, &until, "the aborted step");
    GR_CHECK_EQ_INT(x.st, GR_ERR_INVALID_ARGUMENT);
    GR_CHECK_STR_CONTAINS(x.err.msg, "test_fail: failed on purpose");
  }
  gr_session_free(s);
  gr_graph_free(g);
  gr_master_free(m);
  gr_server_free(srv[0]);
  gr_server_free(srv[1]);
}

static int marked; /* atomic: test_mark ran */
static gr_status mark_kernel(gr_kernel_ctx *ctx) {
  __atomic_store_n(&marked, 1, __ATOMIC_RELEASE);
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}
static const gr_op_def test_mark = GT_UNARY_OP_DEF("test_mark", mark_kernel, NULL, 0, 0);

static void *server_free_main(void *arg) {
  gr_server_free(arg);
  return NULL;
}

/* A step waits in a dequeue on a task whose server shuts down: the
 * server's shutdown ends it (gr_server_free used to wait for it forever). */
static void test_shutdown_ends_a_dequeue(void) {
  gr_error err;
  gr_op_registry_add(&test_mark, &err);
  gr_server *srv = server_on(0);
  gr_master *m = srv ? master_on(&srv, 1, 0) : NULL;
  if (!m) return;
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_output mark = gr_op(g, "test_mark", "mark", (gr_output[]){gr_const_f32(g, 1)}, 1, NULL, 0);
  gr_graph_push_control_deps(g, &mark, 1);
  gr_graph_pop_device_scope(g);
  gr_output deq = empty_queue_dequeue(g);
  gr_graph_pop_control_deps(g);
  gr_session *s = gr_master_session_new(m, g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  step x = {.s = s, .fetch = deq};
  if (s) {
    pthread_create(&x.t, NULL, step_main, &x);
    while (!__atomic_load_n(&marked, __ATOMIC_ACQUIRE)) usleep(1000); /* the step runs there */
    usleep(100000);                                                   /* and waits in its dequeue */
    pthread_t t;
    pthread_create(&t, NULL, server_free_main, srv);
    struct timespec until = deadline_in(WAIT_S);
    step y = {.t = t};
    step_join(&y, &until, "gr_server_free with a step in a dequeue");
    step_join(&x, &until, "the step of the server that shut down");
    GR_CHECK(x.st != GR_OK);
  } else {
    gr_server_free(srv);
  }
  gr_session_free(s);
  gr_graph_free(g);
  gr_master_free(m);
}

/* while (i < n) i = i + 1, under a long name scope: every traced event
 * names a node of some 200 bytes. */
static gr_output count_cond(gr_graph *g, void *arg, const gr_output *v) {
  return gr_less(g, v[0], gr_const_f32(g, (float)*(int *)arg));
}
static void count_body(gr_graph *g, void *arg, const gr_output *v, gr_output *next) {
  (void)arg;
  next[0] = gr_add(g, v[0], gr_const_f32(g, 1));
}

/* A traced step whose events do not fit in a RUN's answer (its map is at
 * most 16 MiB): the task answers with an error saying so (it used to send
 * nothing, and a client without a step timeout waited forever). */
static void test_answer_over_the_wire_limits(void) {
  gr_server *srv = server_on(0);
  gr_master *m = srv ? master_on(&srv, 1, WAIT_S * 1000) : NULL; /* bounds the old hang */
  if (!m) return;
  gr_graph *g = gr_graph_new();
  char scope[201];
  memset(scope, 'n', 200), scope[200] = '\0';
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_graph_push_name_scope(g, scope);
  int n = 8000; /* some 20 MB of events */
  gr_output v[1] = {gr_const_f32(g, 0)};
  GR_CHECK(gr_while_loop(g, count_cond, count_body, &n, 1, v, 1) == GR_OK);
  gr_graph_pop_name_scope(g);
  gr_graph_pop_device_scope(g);
  gr_error err;
  gr_session *s = gr_master_session_new(m, g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  if (s) {
    gr_tensor out;
    gr_step_trace *t = gr_step_trace_new();
    gr_status st = gr_session_run_traced(s, NULL, 0, v, 1, &out, NULL, 0, t, &err);
    GR_CHECK_EQ_INT(st, GR_ERR_RESOURCE_EXHAUSTED);
    GR_CHECK_STR_CONTAINS(err.msg, "the answer could not be sent");
    GR_CHECK_STR_CONTAINS(err.msg, "over the wire's limits");
    printf("a traced step too large to answer: %s\n", err.msg);
    if (st == GR_OK) gr_tensor_release(&out);
    gr_step_trace_free(t);
    st = gr_session_run(s, NULL, 0, v, 1, &out, NULL, 0, &err); /* untraced, it fits */
    GR_CHECK_OK(st, err);
    if (st == GR_OK) {
      GR_CHECK(gr_tensor_get_f64(&out, 0) == n);
      gr_tensor_release(&out);
    }
  }
  gr_session_free(s);
  gr_graph_free(g);
  gr_master_free(m);
  gr_server_free(srv);
}

int main(void) {
  gr_init();
  GR_RUN(test_fetch_index_out_of_range);
  GR_RUN(test_fetch_missing_or_twice);
  GR_RUN(test_lost_task_wakes_every_step);
  GR_RUN(test_abort_ends_a_dequeue);
  GR_RUN(test_shutdown_ends_a_dequeue);
  GR_RUN(test_answer_over_the_wire_limits);
  return gr_test_finish();
}
