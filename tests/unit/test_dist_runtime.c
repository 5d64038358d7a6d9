/* The distributed runtime in one process: servers (each a task with its own
 * network thread) and a master, over loopback TCP on ephemeral ports. The
 * classic first program, variables living on a task across sessions, and
 * random graphs (conds, loops spanning tasks, nested loops) pinned to tasks
 * equal to one device bit for bit. Separate processes: test_dist_cli. */
#include <graphrun.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "distributed/master_internal.h"
#include "distributed/transport_internal.h"
#include "gr_test.h"
#include "random_graph.h"
#include "test_util.h"

#define MAX_TASKS 4
#define SECRET    "runtime-test-secret"
#define CLUSTER   "runtime-test"

typedef struct cluster {
  gr_server *srv[MAX_TASKS];
  char addr[MAX_TASKS][64];
  const char *addrs[MAX_TASKS];
  int n;
  gr_master *m;
} cluster;

/* n tasks: /job:ps/task:0 first when with_ps, the rest /job:worker/task:k,
 * each with `threads` inter-op threads, of the cluster CLUSTER with the
 * secret SECRET. */
static bool cluster_start_threads(cluster *c, int n, bool with_ps, int threads) {
  memset(c, 0, sizeof *c);
  gr_error err;
  for (int k = 0; k < n; k++) {
    bool ps = with_ps && k == 0;
    gr_server_options o = {.job = ps ? "ps" : "worker",
                           .task = with_ps && !ps ? k - 1 : k,
                           .secret = SECRET,
                           .cluster_id = CLUSTER,
                           .inter_op_threads = threads,
                           .quiet = true};
    if (gr_server_new(&o, &c->srv[k], &err) != GR_OK) {
      fprintf(stderr, "server: %s\n", err.msg);
      return false;
    }
    snprintf(c->addr[k], sizeof c->addr[k], "127.0.0.1:%d", gr_server_port(c->srv[k]));
    c->addrs[k] = c->addr[k];
    c->n = k + 1;
  }
  /* these cases check results, not detection: a loaded machine (or ASan)
   * may starve a task's threads past the default 500 ms of silence */
  gr_master_options mo = {.num_tasks = n,
                          .addresses = c->addrs,
                          .secret = SECRET,
                          .cluster_id = CLUSTER,
                          .step_timeout_ms = 60000,
                          .heartbeat_ms = 250,
                          .heartbeat_missed = 12};
  if (gr_master_new(&mo, &c->m, &err) != GR_OK) {
    fprintf(stderr, "master: %s\n", err.msg);
    return false;
  }
  return true;
}

static bool cluster_start(cluster *c, int n, bool with_ps) {
  return cluster_start_threads(c, n, with_ps, 2);
}

static void cluster_stop(cluster *c) {
  gr_master_free(c->m);
  for (int k = 0; k < c->n; k++) gr_server_free(c->srv[k]);
}

/* x = 2 on the ps; y1 = x + 300 on worker 0; y2 = x - 66 on worker 1. */
static void test_classic(void) {
  cluster c;
  GR_CHECK(cluster_start(&c, 3, true));
  if (!c.m) return cluster_stop(&c);
  int nd;
  const char *const *devs = gr_master_devices(c.m, &nd);
  GR_CHECK_EQ_INT(nd, 3);
  /* workers first (unpinned nodes run on the first device), the ps last */
  GR_CHECK_STR_CONTAINS(devs[0], "/job:worker/replica:0/task:0/device:CPU:0");
  GR_CHECK_STR_CONTAINS(devs[1], "/job:worker/replica:0/task:1/device:CPU:0");
  GR_CHECK_STR_CONTAINS(devs[2], "/job:ps/replica:0/task:0/device:CPU:0");
  GR_CHECK(gr_master_task_incarnation(c.m, 0) != 0);
  GR_CHECK(gr_master_task_incarnation(c.m, 0) != gr_master_task_incarnation(c.m, 1));
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:ps/task:0");
  gr_output x = gr_const_f32(g, 2);
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_output y1 = gr_add(g, x, gr_const_f32(g, 300));
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope(g, "/job:worker/task:1");
  gr_output y2 = gr_sub(g, x, gr_const_f32(g, 66));
  gr_graph_pop_device_scope(g);
  gr_output y = gr_add(g, y1, y2);
  gr_error err;
  gr_session *s = gr_master_session_new(c.m, g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  for (int step = 0; s && step < 3; step++) {
    gr_tensor out;
    gr_status st = gr_session_run(s, NULL, 0, &y, 1, &out, NULL, 0, &err);
    GR_CHECK_OK(st, err);
    if (st != GR_OK) break;
    GR_CHECK_NEAR(gr_tensor_get_f64(&out, 0), 238, 0);
    gr_tensor_release(&out);
    /* the constant x is copied to each task that uses it; y (unpinned) runs
     * on the first device, worker 0's: y2 crosses to it */
    GR_CHECK_EQ_INT(gr_session_last_transfers(s).sends, 1);
    GR_CHECK_EQ_INT(gr_session_last_transfers(s).bytes, 4);
  }
  GR_CHECK_EQ_INT(gr_session_num_cached(s), 1);
  /* a traced step: events from every task, on the client's clock */
  gr_step_trace *tr = gr_step_trace_new();
  gr_tensor out;
  int64_t before = gr_trace_now_ns();
  if (s && gr_session_run_traced(s, NULL, 0, &y, 1, &out, NULL, 0, tr, &err) == GR_OK)
    gr_tensor_release(&out);
  int64_t after = gr_trace_now_ns();
  bool seen[3] = {false, false, false};
  for (int i = 0; i < gr_step_trace_count(tr); i++) {
    const gr_trace_event *e = gr_step_trace_event(tr, i);
    for (int d = 0; d < 3; d++)
      if (e->node->assigned_device && !strcmp(e->node->assigned_device, devs[d])) seen[d] = true;
    GR_CHECK(e->start_ns <= e->end_ns && e->start_ns >= before - 1000000 && e->end_ns <= after);
  }
  GR_CHECK(seen[0] && seen[1] && seen[2]);
  gr_step_trace_free(tr);
  gr_session_free(s);
  gr_graph_free(g);
  cluster_stop(&c);
}

/* A variable on the ps task keeps its value across steps and sessions; a
 * second client sees the first one's updates (one container per task). */
static void test_variables_live_on_tasks(void) {
  cluster c;
  GR_CHECK(cluster_start(&c, 2, true));
  if (!c.m) return cluster_stop(&c);
  double seen[2] = {0, 0};
  for (int client = 0; client < 2; client++) {
    gr_graph *g = gr_graph_new();
    gr_graph_push_device_scope(g, "/job:ps/task:0");
    gr_output v = gr_variable(g, "counter", gr_const_f32(g, 10));
    gr_graph_pop_device_scope(g);
    gr_graph_push_device_scope(g, "/job:worker/task:0");
    gr_output one = gr_div(g, gr_mul(g, v, gr_const_f32(g, 0)), gr_const_f32(g, 1));
    gr_output delta = gr_add(g, one, gr_const_f32(g, 1)); /* computed on the worker */
    gr_graph_pop_device_scope(g);
    gr_output inc = gr_assign_add(g, v, delta); /* colocated with the variable */
    gr_error err;
    gr_session *s = gr_master_session_new(c.m, g, NULL, &err);
    GR_CHECK_MSG(s != NULL, "%s", err.msg);
    for (int step = 0; s && step < 3; step++) {
      gr_tensor out;
      gr_status st = gr_session_run(s, NULL, 0, &inc, 1, &out, NULL, 0, &err);
      GR_CHECK_OK(st, err);
      if (st != GR_OK) break;
      seen[client] = gr_tensor_get_f64(&out, 0);
      gr_tensor_release(&out);
    }
    gr_session_free(s);
    gr_graph_free(g);
  }
  GR_CHECK_NEAR(seen[0], 13, 0);
  GR_CHECK_NEAR(seen[1], 16, 0); /* not re-initialised by the second client */
  { /* an assign from a fed value (as a restore does) lands on the variable's task */
    gr_graph *g = gr_graph_new();
    gr_graph_push_device_scope(g, "/job:ps/task:0");
    gr_output v = gr_variable(g, "counter", gr_const_f32(g, 10));
    gr_graph_pop_device_scope(g);
    gr_output p = gr_placeholder(g, "p", GR_F32, gr_shape_scalar());
    gr_output as = gr_assign(g, v, p);
    gr_output r = gr_add(g, v, gr_const_f32(g, 0)); /* read on worker 0 */
    gr_error err;
    gr_session *s = gr_master_session_new(c.m, g, NULL, &err);
    gr_tensor pv = gr_tensor_scalar_f32(42), out;
    gr_feed f = {p, &pv};
    GR_CHECK_OK(gr_session_run(s, &f, 1, NULL, 0, NULL, &as, 1, &err), err);
    gr_status st = gr_session_run(s, NULL, 0, &r, 1, &out, NULL, 0, &err);
    GR_CHECK_OK(st, err);
    GR_CHECK_NEAR(st == GR_OK ? gr_tensor_get_f64(&out, 0) : -1, 42, 0);
    if (st == GR_OK) gr_tensor_release(&out);
    gr_tensor_release(&pv);
    gr_session_free(s);
    gr_graph_free(g);
  }
  /* in the master's private container, on the ps alone */
  gr_resource_mgr *on_ps = gr_server_container(c.srv[0], gr_master_container(c.m));
  gr_resource_mgr *on_worker = gr_server_container(c.srv[1], gr_master_container(c.m));
  gr_var *var = on_ps ? gr_resource_mgr_find_var(on_ps, "counter") : NULL;
  GR_CHECK(var != NULL && gr_var_is_initialized(var));
  GR_CHECK(on_worker && gr_resource_mgr_find_var(on_worker, "counter") == NULL);
  gr_resource_mgr_free(on_ps);
  gr_resource_mgr_free(on_worker);
  cluster_stop(&c);
}

/* A master of c's tasks whose graphs use the container `name` (NULL: one
 * of its own). */
static gr_master *master_of(const cluster *c, const char *name) {
  gr_master_options mo = {.num_tasks = c->n,
                          .addresses = c->addrs,
                          .secret = SECRET,
                          .cluster_id = CLUSTER,
                          .step_timeout_ms = 60000,
                          .heartbeat_ms = 250,
                          .heartbeat_missed = 12,
                          .container = name};
  gr_master *m = NULL;
  gr_error err;
  GR_CHECK_OK(gr_master_new(&mo, &m, &err), err);
  return m;
}

/* A counter on the ps task, bumped by one per step: its graph. */
typedef struct counter {
  gr_graph *g;
  gr_output inc;
  gr_session *s;
} counter;

static void counter_open(counter *k, gr_master *m) {
  k->g = gr_graph_new();
  gr_graph_push_device_scope(k->g, "/job:ps/task:0");
  gr_output v = gr_variable(k->g, "counter", gr_const_f32(k->g, 0));
  gr_graph_pop_device_scope(k->g);
  k->inc = gr_assign_add(k->g, v, gr_const_f32(k->g, 1));
  gr_error err;
  k->s = m ? gr_master_session_new(m, k->g, NULL, &err) : NULL;
  GR_CHECK_MSG(k->s != NULL, "%s", m ? err.msg : "no master");
}

/* n steps; the last value, -1 when a step failed (*st, *err: why). */
static double counter_bump(counter *k, int n, gr_status *st, gr_error *err) {
  double last = -1;
  *st = k->s ? GR_OK : GR_ERR_INTERNAL;
  for (int i = 0; i < n && *st == GR_OK; i++) {
    gr_tensor out;
    *st = gr_session_run(k->s, NULL, 0, &k->inc, 1, &out, NULL, 0, err);
    last = *st == GR_OK ? gr_tensor_get_f64(&out, 0) : -1;
    if (*st == GR_OK) gr_tensor_release(&out);
  }
  return last;
}

static void counter_close(counter *k) {
  gr_session_free(k->s);
  gr_graph_free(k->g);
}

/* A new session of m, n steps: the last value. */
static double bump_once(gr_master *m, int n) {
  counter k;
  counter_open(&k, m);
  gr_status st;
  gr_error err = {0};
  double v = counter_bump(&k, n, &st, &err);
  GR_CHECK_MSG(st == GR_OK, "%s", err.msg);
  counter_close(&k);
  return v;
}

/* Waits (at most 10 s) until task k of c holds n containers. */
static bool containers_become(const cluster *c, int k, int n) {
  for (int64_t end = gr_wire_now_ms() + 10000; gr_wire_now_ms() < end; usleep(5000))
    if (gr_server_num_containers(c->srv[k]) == n) return true;
  return false;
}

/* Containers from C: a master without a name has its own container on the
 * tasks (a new master starts from initial values), which goes when the
 * master does; masters naming one share it, and gr_master_reset drops it:
 * a session still using it fails its next step (GR_ERR_ABORTED, naming
 * it), a new one starts over, and a named one outlives its masters. */
static void test_containers(void) {
  cluster c;
  GR_CHECK(cluster_start(&c, 2, true));
  if (!c.m) return cluster_stop(&c);
  GR_CHECK_NEAR(bump_once(c.m, 3), 3, 0);
  gr_master *own = master_of(&c, NULL);
  GR_CHECK(own && strncmp(gr_master_container(own), "_run.", 5) == 0 &&
           strcmp(gr_master_container(own), gr_master_container(c.m)) != 0);
  GR_CHECK_NEAR(bump_once(own, 2), 2, 0); /* not the first master's 3 */
  GR_CHECK_NEAR(bump_once(c.m, 1), 4, 0); /* whose variable is untouched */
  GR_CHECK_EQ_INT(gr_server_num_containers(c.srv[0]), 2);
  gr_master_free(own); /* its connections close: the task drops its container */
  GR_CHECK_MSG(containers_become(&c, 0, 1), "%d containers", gr_server_num_containers(c.srv[0]));
  gr_master *a = master_of(&c, "team"), *b = master_of(&c, "team");
  GR_CHECK(a && b && !strcmp(gr_master_container(a), "team"));
  counter ka;
  counter_open(&ka, a);
  gr_status st;
  gr_error err = {0};
  GR_CHECK_NEAR(counter_bump(&ka, 2, &st, &err), 2, 0);
  GR_CHECK_NEAR(b ? bump_once(b, 3) : -1, 5, 0); /* shared */
  int dropped = 0;
  GR_CHECK_OK(b ? gr_master_reset(b, "team", &dropped, &err) : GR_ERR_INTERNAL, err);
  GR_CHECK_MSG(dropped >= 1, "%d dropped", dropped);
  counter_bump(&ka, 1, &st, &err); /* a's session uses the dropped container */
  GR_CHECK_EQ_INT(st, GR_ERR_ABORTED);
  GR_CHECK_STR_CONTAINS(err.msg, "container 'team' was reset");
  counter_close(&ka);
  GR_CHECK_NEAR(a ? bump_once(a, 1) : -1, 1, 0); /* a new session: a new container */
  GR_CHECK_EQ_INT(b ? gr_master_reset(b, "no way", NULL, &err) : GR_ERR_INTERNAL,
                  GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "reset: container name 'no way'");
  gr_master_options bad = {
      .num_tasks = c.n, .addresses = c.addrs, .secret = SECRET, .container = "_run.1"};
  gr_master *none = NULL;
  GR_CHECK_EQ_INT(gr_master_new(&bad, &none, &err), GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "master: container name '_run.1': want 1 to 64 letters");
  gr_master_free(a);
  gr_master_free(b);
  gr_resource_mgr *team = gr_server_container(c.srv[0], "team"); /* outlives its masters */
  gr_var *v = team ? gr_resource_mgr_find_var(team, "counter") : NULL;
  GR_CHECK(v && gr_var_is_initialized(v) && gr_tensor_get_f64(gr_var_value(v), 0) == 1);
  gr_resource_mgr_free(team);
  cluster_stop(&c);
}

/* Feeds and fetches cross the master's connections; a kernel error on one
 * task fails the step with that error, naming the task, not a cancellation. */
static void test_feeds_and_errors(void) {
  cluster c;
  GR_CHECK(cluster_start(&c, 2, false));
  if (!c.m) return cluster_stop(&c);
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(1, (int64_t[]){3}));
  gr_graph_push_device_scope(g, "/job:worker/task:1");
  gr_output y = gr_mul(g, x, x);
  gr_output idx = gr_placeholder(g, "i", GR_I32, gr_shape_make(1, (int64_t[]){1}));
  gr_output pick = gr_gather(g, y, idx, 0);
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_output z = gr_add(g, pick, gr_const_f32(g, 1));
  gr_graph_pop_device_scope(g);
  gr_error err;
  gr_session *s = gr_master_session_new(c.m, g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  gr_tensor xv, iv, out;
  gr_tensor_from_data(&xv, GR_F32, &(gr_shape){1, {3}}, (float[]){1, 2, 3}, &err);
  gr_tensor_from_data(&iv, GR_I32, &(gr_shape){1, {1}}, (int32_t[]){2}, &err);
  gr_feed f[] = {{x, &xv}, {idx, &iv}};
  gr_status st0 = gr_session_run(s, f, 2, &z, 1, &out, NULL, 0, &err);
  GR_CHECK_OK(st0, err);
  GR_CHECK_NEAR(st0 == GR_OK ? gr_tensor_get_f64(&out, 0) : -1, 10, 0);
  gr_tensor_release(&out);
  gr_tensor_release(&iv);
  gr_tensor_from_data(&iv, GR_I32, &(gr_shape){1, {1}}, (int32_t[]){7}, &err);
  gr_status st = gr_session_run(s, f, 2, &z, 1, &out, NULL, 0, &err);
  GR_CHECK(st != GR_OK && st != GR_ERR_CANCELLED);
  GR_CHECK_STR_CONTAINS(err.msg, "/job:worker/replica:0/task:1");
  /* the cluster serves the next step */
  gr_tensor_release(&iv);
  gr_tensor_from_data(&iv, GR_I32, &(gr_shape){1, {1}}, (int32_t[]){0}, &err);
  st0 = gr_session_run(s, f, 2, &z, 1, &out, NULL, 0, &err);
  GR_CHECK_OK(st0, err);
  GR_CHECK_NEAR(st0 == GR_OK ? gr_tensor_get_f64(&out, 0) : -1, 2, 0);
  gr_tensor_release(&out);
  gr_tensor_release(&xv);
  gr_tensor_release(&iv);
  gr_session_free(s);
  gr_graph_free(g);
  cluster_stop(&c);
}

/* A frame completed by the last read() a connection makes per wake-up is
 * delivered at once, not when more bytes arrive: with one read per wake-up
 * every frame ends that way (the first GET_STATUS went unanswered). A 4 MiB
 * tensor crosses in many reads. */
static void test_frame_ends_a_wakeup(void) {
  gr_transport_set_read_rounds(1);
  cluster c;
  GR_CHECK(cluster_start(&c, 2, false));
  if (!c.m) {
    cluster_stop(&c);
    gr_transport_set_read_rounds(0);
    return;
  }
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_output v = gr_variable(g, "big", gr_fill(g, GR_F32, (gr_shape){1, {1 << 20}}, 0.5));
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope(g, "/job:worker/task:1");
  gr_output sum = gr_reduce_sum(g, v, NULL, 0, false);
  gr_graph_pop_device_scope(g);
  gr_error err;
  gr_session *s = gr_master_session_new(c.m, g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  for (int step = 0; s && step < 3; step++) {
    gr_tensor out;
    gr_status st = gr_session_run(s, NULL, 0, &sum, 1, &out, NULL, 0, &err);
    GR_CHECK_OK(st, err);
    if (st != GR_OK) break;
    GR_CHECK_NEAR(gr_tensor_get_f64(&out, 0), 0.5 * (1 << 20), 0);
    GR_CHECK_EQ_INT(gr_session_last_transfers(s).bytes, 4 << 20);
    gr_tensor_release(&out);
  }
  gr_session_free(s);
  gr_graph_free(g);
  cluster_stop(&c);
  gr_transport_set_read_rounds(0);
}

/* 1,000 random graphs with conds, loops spanning tasks and nested loops
 * (the partition property test's generator), every op pinned to a random
 * one of 2 to 4 tasks, every third with recv scheduling: the same values as
 * one local device, bit for bit.
 * A fresh cluster per case: each graph's variable "v" starts anew. */
static void test_random_graphs(void) {
  enum { CASES = 1000 };
  gt_set_pin_format("/job:worker/task:%d");
  int crossed = 0;
  for (int i = 0; i < CASES; i++) {
    int TASKS = 2 + i % 3; /* 2 to 4 tasks */
    cluster c;
    GR_CHECK(cluster_start(&c, TASKS, false));
    if (!c.m) {
      cluster_stop(&c);
      break;
    }
    gt_rgraph rg = gt_random_graph(1000 + (uint64_t)i, TASKS, 77 + (uint64_t)i, true);
    gr_tensor want[6], got[6];
    gt_set_pin_format(NULL);
    gt_rgraph local = gt_random_graph(1000 + (uint64_t)i, 0, 0, true);
    gt_set_pin_format("/job:worker/task:%d");
    gt_random_graph_run(&local, 1, 1, false, want);
    gr_error err;
    gr_session_options so = {.schedule_recvs = i % 3 == 1};
    gr_session *s = gr_master_session_new(c.m, rg.g, &so, &err);
    GR_CHECK_MSG(s != NULL, "case %d: %s", i, err.msg);
    if (s) {
      gt_random_graph_run_session(&rg, s, got);
      crossed += gr_session_last_transfers(s).sends > 0;
      for (int k = 0; k < rg.nf; k++) {
        GR_CHECK_MSG(gr_tensor_num_bytes(&got[k]) == gr_tensor_num_bytes(&want[k]) &&
                         !memcmp(gr_tensor_data(&got[k]), gr_tensor_data(&want[k]),
                                 gr_tensor_num_bytes(&want[k])),
                     "case %d fetch %d differs", i, k);
        gr_tensor_release(&got[k]);
      }
      gr_session_free(s);
    }
    for (int k = 0; k < local.nf; k++) gr_tensor_release(&want[k]);
    gr_graph_free(rg.g);
    gr_graph_free(local.g);
    cluster_stop(&c);
  }
  gt_set_pin_format(NULL);
  printf("random graphs: %d cases, %d crossed tasks\n", CASES, crossed);
  GR_CHECK(crossed > CASES * 7 / 10);
}

/* Four independent branches of products of a seeded random matrix, summed;
 * one branch pinned to worker 1 when pin is set (NULL: none). */
static gr_output branches(gr_graph *g, const char *pin) {
  gr_output x = gr_random_normal(g, GR_F32, gr_shape_make(2, (int64_t[]){32, 32}), 0, 1, 7);
  gr_output sum = {0};
  for (int b = 0; b < 4; b++) {
    if (b == 3 && pin) gr_graph_push_device_scope(g, pin);
    gr_output y = gr_tanh(g, gr_matmul(g, x, x, b % 2, false));
    y = gr_matmul(g, y, x, false, b >= 2);
    if (b == 3 && pin) gr_graph_pop_device_scope(g);
    sum = b ? gr_add(g, sum, y) : y;
  }
  return gr_reduce_sum(g, sum, NULL, 0, false);
}

static double run_once(gr_session *s, gr_output y) {
  gr_error err;
  gr_tensor out;
  if (!s || gr_session_run(s, NULL, 0, &y, 1, &out, NULL, 0, &err) != GR_OK) return -1e30;
  double v = gr_tensor_get_f64(&out, 0);
  gr_tensor_release(&out);
  return v;
}

/* gr_master_place_graph: round-robin spreads the unpinned nodes over every
 * task, the cost model keeps them on the tasks' devices, pins stay; either
 * way the step gives the one-process result bit for bit. A pin to a task
 * the cluster lacks fails, naming it, unless soft. */
static void test_master_places(void) {
  gr_graph *lg = gr_graph_new();
  gr_output ly = branches(lg, NULL);
  gr_error err;
  gr_session *ls = gr_session_new(lg, NULL, &err);
  double want = run_once(ls, ly);
  gr_session_free(ls);
  gr_graph_free(lg);
  cluster c;
  GR_CHECK(cluster_start(&c, 3, true));
  if (!c.m) return cluster_stop(&c);
  int nd;
  const char *const *devs = gr_master_devices(c.m, &nd);
  for (int mode = GR_PLACE_COST; mode <= GR_PLACE_ROUND_ROBIN; mode++) {
    gr_graph *g = gr_graph_new();
    gr_output y = branches(g, "/job:worker/task:1");
    GR_CHECK_OK(gr_master_place_graph(c.m, g, (gr_place_mode)mode, false, &err), err);
    int used[MAX_TASKS] = {0}, unplaced = 0;
    for (int i = 0; i < gr_graph_num_nodes(g); i++) {
      const gr_node *n = gr_graph_node(g, i);
      if (n->requested_device[0]) {
        GR_CHECK_STR_CONTAINS(n->requested_device, "/job:worker/task:1");
        continue;
      }
      int d = -1;
      for (int k = 0; k < nd; k++)
        if (n->assigned_device && !strcmp(n->assigned_device, devs[k])) d = k;
      if (d < 0)
        unplaced++;
      else
        used[d]++;
    }
    GR_CHECK_EQ_INT(unplaced, 0);
    if (mode == GR_PLACE_ROUND_ROBIN)
      for (int k = 0; k < nd; k++) GR_CHECK_MSG(used[k] > 0, "no node on %s", devs[k]);
    gr_session *s = gr_master_session_new(c.m, g, NULL, &err);
    GR_CHECK_MSG(s != NULL, "%s", err.msg);
    double got = run_once(s, y);
    GR_CHECK_MSG(got == want, "mode %d: %.9g, one process %.9g", mode, got, want);
    gr_session_free(s);
    gr_graph_free(g);
  }
  gr_graph *g = gr_graph_new();
  branches(g, "/job:worker/task:7");
  GR_CHECK(gr_master_place_graph(c.m, g, GR_PLACE_COST, false, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "task:7");
  GR_CHECK_OK(gr_master_place_graph(c.m, g, GR_PLACE_COST, true, &err), err);
  gr_graph_free(g);
  cluster_stop(&c);
}

/* sleeps, uncounted (the other task's kernel) */
static gr_status sleep_kernel(gr_kernel_ctx *ctx) {
  usleep(20000);
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}
static const gr_op_def test_sleep =
    GT_UNARY_OP_DEF("test_sleep", sleep_kernel, NULL, 0, GR_OP_EXPENSIVE);

/* the loop of the control-flow variant: i < 2; b = test_busy(b) */
static gr_output two_rounds(gr_graph *g, void *arg, const gr_output *v) {
  (void)arg;
  return gr_less(g, v[0], gr_const_i64(g, 2));
}
static void busy_round(gr_graph *g, void *arg, const gr_output *v, gr_output *next) {
  (void)arg;
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  next[1] = gr_op(g, "test_busy", NULL, &v[1], 1, NULL, 0);
}

/* A task with one inter-op thread runs one kernel at a time. Worker 0 runs
 * a chain of two sleeping kernels on b, which worker 1 sends at once, while
 * a, which worker 1 sends after its own sleeping kernel, arrives: the node
 * that a makes ready waits for the chain instead of running on the thread
 * that delivered a. So two tasks with one thread each need two cores, no
 * more. The same with the chain in a while loop (the control-flow
 * executor). */
static void test_one_thread_per_task(void) {
  gr_error err;
  gr_op_registry_add(&gt_busy_op, &err);
  gr_op_registry_add(&test_sleep, &err);
  cluster c;
  GR_CHECK(cluster_start_threads(&c, 2, false, 1));
  if (!c.m) return cluster_stop(&c);
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:worker/task:1");
  gr_output one = gr_const_f32(g, 1);
  gr_output a = gr_op(g, "test_sleep", "late_a", &one, 1, NULL, 0), b = gr_const_f32(g, 2);
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_output ya = gr_op(g, "test_busy", "busy_a", &a, 1, NULL, 0);
  gr_output yb = gr_op(g, "test_busy", "busy_b", &b, 1, NULL, 0);
  yb = gr_op(g, "test_busy", "busy_b2", &yb, 1, NULL, 0);
  gr_output y = gr_add(g, ya, yb);
  /* the same in a loop: b through test_busy twice */
  gr_output lv[2] = {gr_const_i64(g, 0), b};
  GR_CHECK(gr_while_loop(g, two_rounds, busy_round, NULL, 2, lv, 1) == GR_OK);
  gr_output y_loop = gr_add(g, ya, lv[1]);
  gr_graph_pop_device_scope(g);
  gr_session *s = gr_master_session_new(c.m, g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  for (int step = 0; s && step < 8; step++) {
    if (step == 4) y = y_loop;
    gt_gauge_reset();
    gr_tensor out;
    gr_status st = gr_session_run(s, NULL, 0, &y, 1, &out, NULL, 0, &err);
    GR_CHECK_OK(st, err);
    if (st != GR_OK) break;
    GR_CHECK_NEAR(gr_tensor_get_f64(&out, 0), 3, 0);
    gr_tensor_release(&out);
    GR_CHECK_MSG(gt_gauge_max() == 1, "step %d: %d kernels ran at once on a one-thread task", step,
                 gt_gauge_max());
  }
  gr_session_free(s);
  gr_graph_free(g);
  cluster_stop(&c);
}

/* records whether it ran on a server's network thread (a copy of a size
 * nobody knows: not expensive by its flops) */
static int on_network_thread, runs;
static gr_status where_kernel(gr_kernel_ctx *ctx) {
  char name[16] = "";
  pthread_getname_np(pthread_self(), name, sizeof name);
  __atomic_add_fetch(&runs, 1, __ATOMIC_RELAXED);
  if (!strcmp(name, "gr-net")) __atomic_add_fetch(&on_network_thread, 1, __ATOMIC_RELAXED);
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}
static const gr_op_def test_where = GT_UNARY_OP_DEF("test_where", where_kernel, NULL, 0, 0);

/* A node that a pushed tensor makes ready runs on the network thread only
 * when it is a transfer or known to be small: here the tensor's shape is
 * unknown when the graph is built (a ring's piece, a slice of a fed
 * batch), so the node could be a large copy and goes to the inter-op
 * thread. A small node of known shape may run where the tensor arrived. */
static void test_network_thread_runs_light_nodes(void) {
  gr_error err;
  gr_op_registry_add(&test_where, &err);
  cluster c;
  GR_CHECK(cluster_start_threads(&c, 2, false, 1));
  if (!c.m) return cluster_stop(&c);
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:worker/task:1");
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_make(1, (int64_t[]){-1}));
  gr_output twice = gr_add(g, x, x);
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope(g, "/job:worker/task:0");
  gr_output y = gr_op(g, "test_where", "where", &twice, 1, NULL, 0);
  gr_graph_pop_device_scope(g);
  gr_session *s = gr_master_session_new(c.m, g, NULL, &err);
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  gr_tensor xv = gr_tensor_empty();
  GR_CHECK_OK(gr_tensor_alloc(&xv, GR_F32, &(gr_shape){1, {4}}, &err), err);
  for (int i = 0; i < 4; i++) gr_tensor_set_f64(&xv, i, i);
  gr_feed f = {x, &xv};
  for (int step = 0; s && step < 20; step++) {
    gr_tensor out;
    gr_status st = gr_session_run(s, &f, 1, &y, 1, &out, NULL, 0, &err);
    GR_CHECK_OK(st, err);
    if (st != GR_OK) break;
    GR_CHECK_NEAR(gr_tensor_get_f64(&out, 3), 6, 0);
    gr_tensor_release(&out);
  }
  GR_CHECK_EQ_INT(runs, 20);
  GR_CHECK_MSG(on_network_thread == 0, "%d of %d runs on the network thread", on_network_thread,
               runs);
  gr_tensor_release(&xv);
  gr_session_free(s);
  gr_graph_free(g);
  cluster_stop(&c);
}

static void stall_800ms(void *arg) {
  (void)arg;
  usleep(800 * 1000);
}

/* The client's own network thread starved of CPU (a loaded machine): its
 * heartbeat ticks and pings come late, and a task that was never asked is
 * not silent. The default heartbeats (100 ms, 5 periods) used to declare
 * the task lost at the first tick after an 800 ms stall. */
static void test_starved_client(void) {
  gr_error err;
  gr_server *srv;
  gr_server_options so = {
      .job = "worker", .task = 0, .secret = SECRET, .inter_op_threads = 1, .quiet = true};
  GR_CHECK_OK(gr_server_new(&so, &srv, &err), err);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", gr_server_port(srv));
  const char *addrs[1] = {addr};
  gr_master_options mo = {
      .num_tasks = 1, .addresses = addrs, .secret = SECRET, .step_timeout_ms = 60000};
  gr_master *m = NULL;
  GR_CHECK_OK(gr_master_new(&mo, &m, &err), err);
  gr_graph *g = gr_graph_new();
  gr_output y = gr_add(g, gr_const_f32(g, 1), gr_const_f32(g, 2));
  gr_session *s = m ? gr_master_session_new(m, g, NULL, &err) : NULL;
  GR_CHECK_MSG(s != NULL, "%s", err.msg);
  for (int round = 0; s && round < 3; round++) {
    gr_tensor out;
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &y, 1, &out, NULL, 0, &err), err);
    gr_tensor_release(&out);
    GR_CHECK_OK(gr_loop_call(m->loop, stall_800ms, NULL, &err), err);
    usleep(1000 * 1000); /* the stall, then a few ticks */
    gr_status st = gr_session_run(s, NULL, 0, &y, 1, &out, NULL, 0, &err);
    GR_CHECK_MSG(st == GR_OK, "round %d: %s", round, err.msg);
    if (st == GR_OK) gr_tensor_release(&out);
  }
  gr_session_free(s);
  gr_graph_free(g);
  gr_master_free(m);
  gr_server_free(srv);
}

int main(void) {
  GR_RUN(test_network_thread_runs_light_nodes);
  GR_RUN(test_starved_client);
  GR_RUN(test_one_thread_per_task);
  GR_RUN(test_classic);
  GR_RUN(test_variables_live_on_tasks);
  GR_RUN(test_containers);
  GR_RUN(test_feeds_and_errors);
  GR_RUN(test_frame_ends_a_wakeup);
  GR_RUN(test_random_graphs);
  GR_RUN(test_master_places);
  return gr_test_finish();
}
