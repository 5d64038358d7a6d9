/* The master on many tasks at once (master_dial.c, master_run.c): 16
 * server tasks in this process (each with its own network thread, on
 * ephemeral loopback ports) dialled at once, registered and run in parallel;
 * a task that cannot be reached, or that goes away before registration, is
 * named in the error. */
#include <graphrun.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gr_test.h"

#define N      16
#define SECRET "fanout-test-secret"

typedef struct cluster {
  gr_server *srv[N];
  char addr[N][64], name[N][64];
  const char *addrs[N], *names[N];
} cluster;

static bool start(cluster *c) {
  memset(c, 0, sizeof *c);
  gr_error err;
  for (int k = 0; k < N; k++) {
    gr_server_options o = {
        .job = "worker", .task = k, .secret = SECRET, .inter_op_threads = 1, .quiet = true};
    if (gr_server_new(&o, &c->srv[k], &err) != GR_OK) {
      fprintf(stderr, "server %d: %s\n", k, err.msg);
      return false;
    }
    snprintf(c->addr[k], sizeof c->addr[k], "127.0.0.1:%d", gr_server_port(c->srv[k]));
    snprintf(c->name[k], sizeof c->name[k], "/job:worker/task:%d", k);
    c->addrs[k] = c->addr[k];
    c->names[k] = c->name[k];
  }
  return true;
}

static void stop(cluster *c) {
  for (int k = 0; k < N; k++) gr_server_free(c->srv[k]);
}

/* start, or a failed check (and everything stopped) */
static bool started(cluster *c) {
  if (start(c)) return true;
  GR_CHECK(!"servers started");
  stop(c);
  return false;
}

static gr_master_options options(cluster *c) {
  /* a loaded machine (or ASan) may starve 16 tasks' threads: generous */
  return (gr_master_options){.num_tasks = N,
                             .addresses = c->addrs,
                             .task_names = c->names,
                             .secret = SECRET,
                             .connect_timeout_ms = 60000,
                             .step_timeout_ms = 60000,
                             .heartbeat_ms = 250,
                             .heartbeat_missed = 40};
}

/* On task k: own_k = x + k, and s_k = s_{k-1} + x (s_0 = x): a chain
 * through every task, whose end is N x. */
static void build(gr_graph *g, gr_output *x, gr_output *own, gr_output *last) {
  *x = gr_placeholder(g, "x", GR_F32, (gr_shape){0, {0}});
  gr_output s = *x;
  for (int k = 0; k < N; k++) {
    char dev[64];
    snprintf(dev, sizeof dev, "/job:worker/task:%d", k);
    gr_graph_push_device_scope(g, dev);
    own[k] = gr_add(g, *x, gr_const_f32(g, (float)k));
    if (k > 0) s = gr_add(g, s, *x);
    gr_graph_pop_device_scope(g);
  }
  *last = s;
}

/* A master of c's tasks (NULL: a failed check). */
static gr_master *connect_all(cluster *c) {
  gr_master_options mo = options(c);
  gr_master *m = NULL;
  gr_error err;
  GR_CHECK_OK(gr_master_new(&mo, &m, &err), err);
  return m;
}

/* build's graph in g and a session of m on it (NULL: a failed check). */
static gr_session *session_on(gr_master *m, gr_graph *g, gr_output *x, gr_output *own,
                              gr_output *last) {
  gr_error err = {0};
  build(g, x, own, last);
  gr_session *s = m ? gr_master_session_new(m, g, NULL, &err) : NULL;
  GR_CHECK_MSG(s, "%s", err.msg);
  return s;
}

/* 16 tasks dialled, registered and run: every answer right, step after
 * step. */
static void test_sixteen_tasks(void) {
  cluster c;
  gr_error err;
  if (!started(&c)) return;
  gr_master *m = connect_all(&c);
  int nd = 0;
  if (m) gr_master_devices(m, &nd);
  GR_CHECK_EQ_INT(nd, N);
  for (int k = 0; m && k < N; k++) { /* each task in its place, whichever answered first */
    char want[32];
    snprintf(want, sizeof want, "/task:%d", k);
    const char *got = gr_master_task_name(m, k);
    GR_CHECK_MSG(strlen(got) > strlen(want) && !strcmp(got + strlen(got) - strlen(want), want),
                 "task %d is %s", k, got);
  }
  gr_graph *g = gr_graph_new();
  gr_output x, own[N], last;
  gr_session *s = session_on(m, g, &x, own, &last);
  gr_output fetch[N + 1];
  memcpy(fetch, own, sizeof own);
  fetch[N] = last;
  for (int step = 0; s && step < 20; step++) {
    gr_tensor xv = gr_tensor_scalar_f32((float)step), out[N + 1];
    gr_feed feed = {x, &xv};
    gr_status st = gr_session_run(s, &feed, 1, fetch, N + 1, out, NULL, 0, &err);
    gr_tensor_release(&xv);
    GR_CHECK_OK(st, err);
    if (st != GR_OK) break;
    for (int k = 0; k < N; k++) {
      GR_CHECK_NEAR(gr_tensor_get_f64(&out[k], 0), step + k, 0);
      gr_tensor_release(&out[k]);
    }
    GR_CHECK_NEAR(gr_tensor_get_f64(&out[N], 0), (double)N * step, 0);
    gr_tensor_release(&out[N]);
  }
  gr_session_free(s);
  gr_graph_free(g);
  gr_master_free(m);
  stop(&c);
}

/* A port nothing listens on (bound, then closed). */
static int dead_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

/* Dialled at once, a task that cannot be reached is still the one named,
 * with its address; the others' connections are closed. */
static void test_unreachable_task_named(void) {
  cluster c;
  gr_error err;
  if (!started(&c)) return;
  snprintf(c.addr[9], sizeof c.addr[9], "127.0.0.1:%d", dead_port());
  gr_master_options mo = options(&c);
  mo.connect_timeout_ms = 500;
  gr_master *m = NULL;
  GR_CHECK_EQ_INT(gr_master_new(&mo, &m, &err), GR_ERR_UNAVAILABLE);
  GR_CHECK(m == NULL);
  GR_CHECK_STR_CONTAINS(err.msg, "/job:worker/task:9");
  GR_CHECK_STR_CONTAINS(err.msg, c.addr[9]);
  /* the servers are fine: a master without the dead address runs */
  mo.num_tasks = 9;
  GR_CHECK_OK(gr_master_new(&mo, &m, &err), err);
  gr_master_free(m);
  stop(&c);
}

/* A task gone between connecting and registering: the step fails naming
 * it as lost (its peers, which cannot reach it, fail too and later), not a
 * hang or a crash. */
static void test_task_gone_before_register(void) {
  cluster c;
  gr_error err;
  if (!started(&c)) return;
  gr_master *m = connect_all(&c);
  gr_server_free(c.srv[5]);
  c.srv[5] = NULL;
  gr_graph *g = gr_graph_new();
  gr_output x, own[N], last;
  gr_session *s = session_on(m, g, &x, own, &last);
  gr_tensor xv = gr_tensor_scalar_f32(1), out;
  gr_feed feed = {x, &xv};
  gr_status st = s ? gr_session_run(s, &feed, 1, &last, 1, &out, NULL, 0, &err) : GR_ERR_INTERNAL;
  gr_tensor_release(&xv);
  GR_CHECK(st != GR_OK);
  if (st == GR_OK) gr_tensor_release(&out);
  /* the lost task itself, not a task that could not reach it */
  GR_CHECK_STR_CONTAINS(err.msg, "lost /job:worker/replica:0/task:5");
  gr_session_free(s);
  gr_graph_free(g);
  gr_master_free(m);
  stop(&c);
}

int main(void) {
  GR_RUN(test_sixteen_tasks);
  GR_RUN(test_unreachable_task_named);
  GR_RUN(test_task_gone_before_register);
  return gr_test_finish();
}
