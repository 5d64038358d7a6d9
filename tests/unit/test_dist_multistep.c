/* Multi-step runs (gr_session_run_steps) over a cluster: each task loops
 * over its partitions without the master between the steps.
 *
 *   test_one_way_flow    task 0 only sends (16 MiB a step) to task 1, which
 *                        only receives and works longer on it than task 0
 *                        (three tanh): 100 steps move 1.6 GiB, more than
 *                        a task parks for steps that have not started
 *                        (1 GiB): only the receivers' DONEs (task 0 starts
 *                        step i once task 1 ended step i - 2) keep it
 *                        from failing; the sums are exact.
 *   test_same_as_steps   random draws (keyed on the step id) on one task
 *                        summed into a variable on another: N steps in one
 *                        run on the cluster give the bits of N single steps
 *                        in one process, and the step counter moves by N;
 *                        traced, such a run gives one step's events (the
 *                        last's), from both tasks, as in one process.
 *   test_failing_step    a queue on task 1 holds 3 values and is closed:
 *                        the 4th step fails; the run reports the queue's
 *                        error naming that step, and every task ends the
 *                        3 steps before it (task 0 sums all 3 values,
 *                        though task 1 failed while task 0 could still be
 *                        in step 2 or 3).
 *   test_task_lost       a task ends in the middle of a long run: the run
 *                        fails naming it, well before its deadline.
 *   test_all_gather_in_place  N steps of a collective all-reduce of 1001
 *                        f32 (chunks of 501 and 500: no multiple of the
 *                        wire's 64-byte alignment) in one run: every
 *                        member's total is exact, and each member's
 *                        all-gather piece of each step was read off the
 *                        network straight into the collective's buffer
 *                        (gr_transport_bodies_into), not copied.
 *
 * Servers run in this process (gr_server_new); every wait is bounded by
 * the master's step timeout. */
#include <graphrun.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "distributed/transport_internal.h" /* gr_transport_bodies_into */
#include "gr_test.h"
#include "example_runner.h"
#include "test_util.h"

#define SECRET "dist-multistep-test-secret"

typedef struct cluster {
  gr_server *srv[2];
  gr_master *m;
  char addr[2][64];
} cluster;

static bool cluster_up(cluster *k, int step_timeout_ms) {
  gr_error err;
  memset(k, 0, sizeof *k);
  const char *addrs[2];
  for (int i = 0; i < 2; i++) {
    gr_server_options so = {
        .job = "worker", .task = i, .secret = SECRET, .inter_op_threads = 2, .quiet = true};
    GR_CHECK_OK(gr_server_new(&so, &k->srv[i], &err), err);
    if (!k->srv[i]) return false;
    snprintf(k->addr[i], sizeof k->addr[i], "127.0.0.1:%d", gr_server_port(k->srv[i]));
    addrs[i] = k->addr[i];
  }
  gr_master_options mo = {
      .num_tasks = 2, .addresses = addrs, .secret = SECRET, .step_timeout_ms = step_timeout_ms};
  GR_CHECK_OK(gr_master_new(&mo, &k->m, &err), err);
  return k->m != NULL;
}

static void cluster_down(cluster *k) {
  gr_master_free(k->m);
  for (int i = 0; i < 2; i++) gr_server_free(k->srv[i]);
}

typedef struct prog {
  gr_graph *g;
  gr_dsl_program *p;
  gr_session *s;
} prog;

/* text on the cluster (m) or in one process (m NULL, soft placement) */
static bool prog_load(prog *pr, const char *text, gr_master *m) {
  gr_error err;
  memset(pr, 0, sizeof *pr);
  pr->g = gr_graph_new();
  GR_CHECK_OK(gr_dsl_load_string("multistep.gr", text, pr->g, NULL, &pr->p, &err), err);
  if (!pr->p) return false;
  gr_session_options o = {.soft_placement = m == NULL};
  pr->s = m ? gr_master_session_new(m, pr->g, &o, &err) : gr_session_new(pr->g, &o, &err);
  GR_CHECK_MSG(pr->s != NULL, "%s", err.msg);
  return pr->s != NULL;
}

static void prog_free(prog *pr) {
  gr_session_free(pr->s);
  gr_dsl_program_free(pr->p);
  gr_graph_free(pr->g);
}

static gr_output out(prog *pr, const char *name) {
  gr_output o = {NULL, 0};
  GR_CHECK_MSG(gr_dsl_lookup(pr->p, name, &o), "no '%s'", name);
  return o;
}

/* fetches name (after targets) as f64 */
static double fetch_f64(prog *pr, const char *name) {
  gr_output x = out(pr, name);
  gr_tensor t;
  gr_error err;
  double v = -1;
  if (x.node && gr_session_run(pr->s, NULL, 0, &x, 1, &t, NULL, 0, &err) == GR_OK) {
    v = gr_tensor_get_f64(&t, 0);
    gr_tensor_release(&t);
  } else {
    GR_CHECK_MSG(false, "fetching %s: %s", name, x.node ? err.msg : "no node");
  }
  return v;
}

static void test_one_way_flow(void) {
  cluster k;
  prog pr;
  if (!cluster_up(&k, 120000) ||
      !prog_load(&pr,
                 "device \"/job:worker/task:0\" {\n"
                 "  n = variable(const(0, i64))\n"
                 "  tick = assign_add(n, const(1, i64))\n"
                 "  big = zeros([4194304]) + cast(tick, f32)\n"
                 "}\n"
                 "device \"/job:worker/task:1\" {\n"
                 "  acc = variable(const(0.0, f64))\n"
                 "  slow = big + (tanh(big) + tanh(big * 0.5) + tanh(big * 0.25)) * 0\n"
                 "  upd = assign_add(acc, cast(reduce_max(slow), f64))\n"
                 "}\n",
                 k.m)) {
    cluster_down(&k);
    return;
  }
  gr_output upd = out(&pr, "upd");
  gr_error err;
  GR_CHECK_OK(gr_session_run_steps(pr.s, NULL, 0, NULL, 0, NULL, &upd, 1, 100, NULL, &err), err);
  GR_CHECK_NEAR(fetch_f64(&pr, "acc"), 5050.0, 0);
  GR_CHECK_NEAR(fetch_f64(&pr, "n"), 100.0, 0);
  GR_CHECK(gr_session_step(pr.s) >= 100);
  prog_free(&pr);
  cluster_down(&k);
}

static const char *random_text = "device \"/job:worker/task:0\" {\n"
                                 "  r = random_uniform([3], minval=-1, maxval=1, seed=5)\n"
                                 "}\n"
                                 "device \"/job:worker/task:1\" {\n"
                                 "  acc = variable(zeros([3]))\n"
                                 "  add = assign_add(acc, r * 1.5)\n"
                                 "}\n"
                                 "fetch add\n";

static void test_same_as_steps(void) {
  enum { N = 7 };
  cluster k;
  prog one, many;
  if (!prog_load(&one, random_text, NULL)) return;
  gr_output add1 = out(&one, "add"), acc1 = out(&one, "acc");
  gr_tensor want, got, last;
  gr_error err;
  int64_t s0 = gr_session_step(one.s);
  for (int i = 0; i < N; i++) {
    GR_CHECK_OK(gr_session_run(one.s, NULL, 0, &add1, 1, &want, NULL, 0, &err), err);
    if (i < N - 1) gr_tensor_release(&want);
  }
  GR_CHECK_EQ_INT(gr_session_step(one.s) - s0, N);
  if (cluster_up(&k, 60000) && prog_load(&many, random_text, k.m)) {
    gr_output add = out(&many, "add"), acc = out(&many, "acc");
    int64_t m0 = gr_session_step(many.s);
    GR_CHECK_OK(gr_session_run_steps(many.s, NULL, 0, &add, 1, &last, NULL, 0, N, NULL, &err), err);
    GR_CHECK(gt_same_bits(&want, &last)); /* the last step's fetch */
    GR_CHECK_EQ_INT(gr_session_step(many.s) - m0, N);
    gr_tensor a1;
    GR_CHECK_OK(gr_session_run(one.s, NULL, 0, &acc1, 1, &a1, NULL, 0, &err), err);
    GR_CHECK_OK(gr_session_run(many.s, NULL, 0, &acc, 1, &got, NULL, 0, &err), err);
    GR_CHECK(gt_same_bits(&a1, &got)); /* every step's draw was summed alike */
    gr_tensor_release(&a1), gr_tensor_release(&got), gr_tensor_release(&last);
    /* traced: the last step's events only, from both tasks; one process alike */
    gr_step_trace *t1 = gr_step_trace_new(), *tn = gr_step_trace_new();
    GR_CHECK(t1 && tn);
    GR_CHECK_OK(gr_session_run_traced(many.s, NULL, 0, NULL, 0, NULL, &add, 1, t1, &err), err);
    GR_CHECK_OK(gr_session_run_steps(many.s, NULL, 0, NULL, 0, NULL, &add, 1, N, tn, &err), err);
    GR_CHECK(gr_step_trace_count(t1) > 0);
    GR_CHECK_EQ_INT(gr_step_trace_count(tn), gr_step_trace_count(t1));
    bool task[2] = {false, false};
    for (int i = 0; i < gr_step_trace_count(tn); i++) {
      const char *dev = gr_step_trace_event(tn, i)->node->assigned_device;
      task[dev && strstr(dev, "task:1") != NULL] = true;
    }
    GR_CHECK(task[0] && task[1]);
    gr_step_trace_clear(t1), gr_step_trace_clear(tn);
    GR_CHECK_OK(gr_session_run_traced(one.s, NULL, 0, NULL, 0, NULL, &add1, 1, t1, &err), err);
    GR_CHECK_OK(gr_session_run_steps(one.s, NULL, 0, NULL, 0, NULL, &add1, 1, N, tn, &err), err);
    GR_CHECK(gr_step_trace_count(t1) > 0);
    GR_CHECK_EQ_INT(gr_step_trace_count(tn), gr_step_trace_count(t1));
    gr_step_trace_free(t1), gr_step_trace_free(tn);
    /* out of range: refused before anything runs */
    GR_CHECK_EQ_INT(gr_session_run_steps(many.s, NULL, 0, NULL, 0, NULL, &add, 1, 0, NULL, &err),
                    GR_ERR_INVALID_ARGUMENT);
    prog_free(&many);
  }
  gr_tensor_release(&want);
  prog_free(&one);
  cluster_down(&k);
}

static void test_failing_step(void) {
  cluster k;
  prog pr;
  if (!cluster_up(&k, 60000) ||
      !prog_load(&pr,
                 "device \"/job:worker/task:1\" {\n"
                 "  q = fifo_queue([f32], shapes=[[]])\n"
                 "  fill_q = queue_enqueue_many(q, const([1.0, 2.0, 4.0]))\n"
                 "  control_dependencies(fill_q) { close_q = queue_close(q) }\n"
                 "  x = queue_dequeue(q)\n"
                 "}\n"
                 "device \"/job:worker/task:0\" {\n"
                 "  acc = variable(const(0.0))\n"
                 "  add = assign_add(acc, x)\n"
                 "}\n",
                 k.m)) {
    cluster_down(&k);
    return;
  }
  gr_output close_q = out(&pr, "close_q"), add = out(&pr, "add");
  gr_error err;
  GR_CHECK_OK(gr_session_run(pr.s, NULL, 0, NULL, 0, NULL, &close_q, 1, &err), err);
  gr_status st = gr_session_run_steps(pr.s, NULL, 0, NULL, 0, NULL, &add, 1, 50, NULL, &err);
  GR_CHECK_EQ_INT(st, GR_ERR_OUT_OF_RANGE);
  GR_CHECK_MSG(st != GR_OK && strstr(err.msg, "closed") && strstr(err.msg, "step 4 of 50"), "%s",
               err.msg);
  GR_CHECK_NEAR(fetch_f64(&pr, "acc"), 7.0, 0);
  prog_free(&pr);
  cluster_down(&k);
}

typedef struct bg_run {
  gr_session *s;
  gr_output target;
  gr_status st;
  gr_error err;
  volatile int done;
} bg_run;

static void *bg_main(void *arg) {
  bg_run *b = arg;
  b->st =
      gr_session_run_steps(b->s, NULL, 0, NULL, 0, NULL, &b->target, 1, 100000000, NULL, &b->err);
  b->done = 1;
  return NULL;
}

static void test_task_lost(void) {
  cluster k;
  prog pr;
  if (!cluster_up(&k, 600000) || !prog_load(&pr,
                                            "device \"/job:worker/task:0\" {\n"
                                            "  n = variable(const(0, i64))\n"
                                            "  tick = assign_add(n, const(1, i64))\n"
                                            "}\n"
                                            "device \"/job:worker/task:1\" {\n"
                                            "  acc = variable(const(0, i64))\n"
                                            "  add = assign_add(acc, tick)\n"
                                            "}\n",
                                            k.m)) {
    cluster_down(&k);
    return;
  }
  bg_run b = {.s = pr.s, .target = out(&pr, "add")};
  pthread_t t;
  pthread_create(&t, NULL, bg_main, &b);
  usleep(300000); /* the run loops on both tasks */
  GR_CHECK(!b.done);
  gr_server_free(k.srv[1]);
  k.srv[1] = NULL;
  for (int i = 0; i < 6000 && !b.done; i++) usleep(10000); /* 60 s: far less than the deadline */
  GR_CHECK_MSG(b.done, "the run did not end within 60 s of task 1 ending");
  pthread_join(t, NULL);
  GR_CHECK(b.st != GR_OK);
  GR_CHECK_MSG(strstr(b.err.msg, "task:1") != NULL, "%s", b.err.msg);
  prog_free(&pr);
  cluster_down(&k);
}

static const char *sum_text = "device \"/job:worker/task:0\" { a = variable(fill([1001], 1.5)) }\n"
                              "device \"/job:worker/task:1\" { b = variable(fill([1001], 2.25)) }\n"
                              "sa, sb = all_reduce(a, b)\n";

static void test_all_gather_in_place(void) {
  enum { N = 6 };
  cluster k;
  prog pr;
  gr_error err;
  if (!cluster_up(&k, 60000) || !prog_load(&pr, sum_text, k.m)) {
    cluster_down(&k);
    return;
  }
  gr_output x[2] = {out(&pr, "sa"), out(&pr, "sb")};
  gr_tensor t[2];
  GR_CHECK_OK(gr_session_run(pr.s, NULL, 0, x, 2, t, NULL, 0, &err), err); /* registers */
  gr_tensor_release(&t[0]), gr_tensor_release(&t[1]);
  uint64_t before = gr_transport_bodies_into();
  GR_CHECK_OK(gr_session_run_steps(pr.s, NULL, 0, x, 2, t, NULL, 0, N, NULL, &err), err);
  uint64_t into = gr_transport_bodies_into() - before;
  GR_CHECK_MSG(into >= 2 * N, "%llu bodies read into place in %d steps of two members",
               (unsigned long long)into, N);
  for (int m = 0; m < 2; m++) {
    GR_CHECK_EQ_INT(gr_tensor_num_elements(&t[m]), 1001);
    for (int64_t i = 0; i < gr_tensor_num_elements(&t[m]); i++)
      if (gr_tensor_get_f64(&t[m], i) != 3.75) {
        GR_CHECK_MSG(false, "member %d element %lld: %g", m, (long long)i,
                     gr_tensor_get_f64(&t[m], i));
        break;
      }
    gr_tensor_release(&t[m]);
  }
  prog_free(&pr);
  cluster_down(&k);
}

int main(void) {
  gr_init();
  GR_RUN(test_one_way_flow);
  GR_RUN(test_same_as_steps);
  GR_RUN(test_failing_step);
  GR_RUN(test_task_lost);
  GR_RUN(test_all_gather_in_place);
  return gr_test_finish();
}
