/* The prediction of a step as the runtime runs it (docs/placement.md): the
 * dataflow simulation (threads per task, cores per host, transfers once per
 * consuming device, loops' runs), the step costs of the tasks a placement
 * uses, nodes outside the step, and the candidates the cost placer compares
 * (one task, pins only, by layer) with the pins-only margin and the local
 * search. Deterministic inputs, figures computed by hand; no timing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "placer/gr_placer.h"

/* A task of job on host, one device (1e9 flop/s); with an address when port > 0. */
static int task(gr_cluster *c, const char *job, const char *host, int port) {
  int t;
  gr_error err;
  GR_CHECK_OK(gr_cluster_add_task(c, job, host, &t, &err), err);
  if (port > 0) {
    char a[64];
    snprintf(a, sizeof a, "%s:%d", host, port);
    GR_CHECK_OK(gr_cluster_set_task_address(c, t, a, &err), err);
  }
  GR_CHECK_OK(gr_cluster_add_device(c, t, 1e9, 1e15, 0, &err), err);
  return t;
}

/* Every link: latency, bandwidth and step. */
static void links(gr_cluster *c, double latency, double bandwidth, double step) {
  for (int k = 0; k < GR_LINK_COUNT; k++)
    gr_cluster_set_link(c, (gr_link_kind)k,
                        (gr_link){.latency = latency, .bandwidth = bandwidth, .step = step});
}

/* n nodes of `seconds` each (measured times: exact), edges (src, dst, bytes). */
static void graph(gr_place_graph *pg, int n, const double *seconds, const int (*edges)[2],
                  const double *bytes, int ne) {
  gr_error err;
  GR_CHECK_OK(gr_place_graph_init(pg, n, ne, &err), err);
  int e = 0;
  for (int v = 0; v < n; v++) {
    pg->seconds[v] = seconds[v];
    pg->in_off[v] = e;
    for (int k = 0; k < ne; k++)
      if (edges[k][1] == v) pg->in_src[e] = edges[k][0], pg->in_bytes[e++] = bytes[k];
  }
  pg->in_off[n] = e;
}

/* A device runs as many nodes at once as its task has threads, a host as
 * many as it has cores. */
static void test_threads_and_cores(void) {
  gr_place_graph pg;
  graph(&pg, 2, (double[]){1, 1}, NULL, NULL, 0);
  gr_cluster *c = gr_cluster_new();
  task(c, "worker", "h", 0);
  links(c, 0, 1e9, 0);
  gr_error err;
  int dev[2] = {0, 0};
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, dev, NULL), 2, 1e-12);
  GR_CHECK_OK(gr_cluster_set_task_threads(c, 0, 2, &err), err);
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, dev, NULL), 1, 1e-12);
  GR_CHECK_OK(gr_cluster_set_host_cores(c, "h", 1, &err), err);
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, dev, NULL), 2, 1e-12);
  /* two devices of two tasks on one host of one core: one node at a time */
  GR_CHECK_OK(gr_cluster_set_task_threads(c, 0, 1, &err), err);
  task(c, "worker", "h", 0);
  dev[1] = 1;
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, dev, NULL), 2, 1e-12);
  GR_CHECK_OK(gr_cluster_set_host_cores(c, "h", 0, &err), err);
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, dev, NULL), 1, 1e-12);
  /* a time scale stretches a device's nodes */
  GR_CHECK_OK(gr_cluster_set_time_scale(c, 1, 3, &err), err);
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, dev, NULL), 3, 1e-12);
  GR_CHECK(gr_cluster_set_time_scale(c, 1, 0, &err) == GR_ERR_INVALID_ARGUMENT);
  gr_cluster_free(c);
  gr_place_graph_free(&pg);
}

/* The client's step cost once, and each server task's the link from the
 * client's host says; devices of the client's process (no address) add
 * nothing. */
static void test_step_costs(void) {
  gr_cluster *c = gr_cluster_new();
  task(c, "ps", "b", 2222);     /* another host */
  task(c, "worker", "a", 2222); /* the session's first device: the client's host */
  task(c, "worker", "a", 2223);
  task(c, "local", "a", 0); /* no address: in the client's process */
  gr_cluster_set_link(c, GR_LINK_SAME_TASK, (gr_link){.latency = 0, .bandwidth = 1e9, .step = 1});
  gr_cluster_set_link(c, GR_LINK_SAME_HOST, (gr_link){.latency = 0, .bandwidth = 1e9, .step = 10});
  gr_cluster_set_link(c, GR_LINK_CROSS_HOST,
                      (gr_link){.latency = 0, .bandwidth = 1e9, .step = 100});
  GR_CHECK_NEAR(gr_cluster_task_step(c, 0), 100, 0);
  GR_CHECK_NEAR(gr_cluster_task_step(c, 1), 10, 0);
  GR_CHECK_NEAR(gr_cluster_task_step(c, 3), 0, 0);
  bool used[4] = {true, false, true, true};
  GR_CHECK_NEAR(gr_cluster_step_overhead(c, used), 1 + 100 + 10, 0);
  int order[4];
  gr_cluster_session_order(c, order); /* workers, the other job, the ps last */
  GR_CHECK_EQ_INT(order[0], 1);
  GR_CHECK_EQ_INT(order[1], 2);
  GR_CHECK_EQ_INT(order[2], 3);
  GR_CHECK_EQ_INT(order[3], 0);
  /* two independent nodes of 1 s: on one server task 2 + 1 + 10, on two 1 + 1 + 20 */
  gr_place_graph pg;
  graph(&pg, 2, (double[]){1, 1}, NULL, NULL, 0);
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, (int[]){1, 1}, NULL), 13, 1e-12);
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, (int[]){1, 2}, NULL), 22, 1e-12);
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, (int[]){1, 0}, NULL), 1 + 1 + 10 + 100, 1e-12);
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, (int[]){3, 3}, NULL), 2 + 1, 1e-12);
  /* the greedy placer pays a new task's cost: it keeps the two together */
  gr_place_options o = {.dataflow = true};
  gr_place_result r;
  gr_error err;
  GR_CHECK_OK(gr_place_schedule(&pg, c, &o, &r, &err), err);
  GR_CHECK_NEAR(r.step_time, 3, 1e-12); /* both in the client's process */
  gr_place_result_free(&r);
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

/* A tensor goes to another device once, however many consumers it has
 * there, after the latency and its bytes over the bandwidth; in a loop, once
 * per iteration both ends run. */
static void test_transfers(void) {
  gr_cluster *c = gr_cluster_new();
  task(c, "worker", "h", 0);
  task(c, "worker", "h", 0);
  links(c, 0.5, 1e9, 0);
  gr_place_graph pg;
  const int edges[][2] = {{0, 1}, {0, 2}};
  graph(&pg, 3, (double[]){1, 1, 1}, edges, (double[]){1e9, 1e9}, 2);
  double cross;
  /* a on d0 until 1; the tensor lands on d1 at 1 + 1 + 0.5; b and c one after the other */
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, (int[]){0, 1, 1}, &cross), 4.5, 1e-12);
  GR_CHECK_NEAR(cross, 1e9, 0);
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, (int[]){0, 0, 0}, &cross), 3, 1e-12);
  GR_CHECK_NEAR(cross, 0, 0);
  /* the same edges inside a loop of 8 iterations: 8 transfers */
  for (int v = 0; v < 3; v++) pg.runs[v] = 8;
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, (int[]){0, 1, 1}, &cross), 1 + 8 * 1.5 + 2,
                1e-9);
  GR_CHECK_NEAR(cross, 8e9, 0);
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

/* A device runs the node that is ready, not the next in rank order that
 * waits: the executor's way, and the greedy's rank-order simulation's not. */
static void test_dataflow_runs_what_is_ready(void) {
  gr_cluster *c = gr_cluster_new();
  task(c, "worker", "h", 0);
  task(c, "worker", "h", 0);
  links(c, 0, 1e15, 0);
  /* p (d1) -> x (d0) -> z (d0); y (d0) alone: ranks p 3, x 2, y 1, z 1 */
  gr_place_graph pg;
  const int edges[][2] = {{0, 1}, {1, 3}};
  graph(&pg, 4, (double[]){1, 1, 1, 1}, edges, (double[]){0, 0}, 2);
  int dev[4] = {1, 0, 0, 0};
  GR_CHECK_NEAR(gr_place_simulate(&pg, c, dev, NULL), 4, 1e-12);          /* x waits, then z, y */
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, dev, NULL), 3, 1e-12); /* y while x waits */
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

/* Nodes outside the step cost nothing and still get a device: with their
 * input (or group). */
static void test_outside_the_step(void) {
  gr_cluster *c = gr_cluster_new();
  task(c, "worker", "h", 0);
  task(c, "worker", "h", 0);
  links(c, 0, 1e15, 0);
  gr_place_graph pg;
  const int edges[][2] = {{0, 1}, {0, 2}};
  graph(&pg, 3, (double[]){1, 1, 100}, edges, (double[]){8, 8}, 2);
  pg.active[2] = 0; /* an evaluation: 100 s, not in the step */
  GR_CHECK_NEAR(gr_place_simulate_dataflow(&pg, c, (int[]){0, 0, 1}, NULL), 2, 1e-12);
  gr_place_options o = {.dataflow = true};
  gr_place_result r;
  gr_error err;
  GR_CHECK_OK(gr_place_schedule(&pg, c, &o, &r, &err), err);
  GR_CHECK_NEAR(r.step_time, 2, 1e-12);
  GR_CHECK_EQ_INT(r.device[2], r.device[0]);
  GR_CHECK_EQ_INT(r.reason[2], GR_PLACE_OUTSIDE);
  gr_place_result_free(&r);
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

/* The candidates: one task, pins only (the session order's first device a
 * pin allows), round robin by layer; each keeps the colocation groups
 * whole; the fastest wins, and pins only stays within min_gain. */
static void test_candidates(void) {
  gr_cluster *c = gr_cluster_new();
  task(c, "ps", "h", 0);     /* d0: last in the session order */
  task(c, "worker", "h", 0); /* d1: first */
  task(c, "worker", "h", 0); /* d2 */
  links(c, 0, 1e15, 0);
  /* 0 and 1 independent (layers 0 and 1), 2 in 0's group (layer 1), 3 pinned to {d0, d2} */
  gr_place_graph pg;
  graph(&pg, 4, (double[]){1, 1, 1, 1}, NULL, NULL, 0);
  pg.group[2] = 0;
  pg.allow[3] = gr_place_graph_add_allow_set(&pg, 3, (int[]){0, 2}, 2);
  int layer[4] = {0, 1, 1, 2};
  gr_place_options o = {.dataflow = true, .layer = layer, .resolve_candidates = true};
  gr_place_result r;
  gr_error err;
  GR_CHECK_OK(gr_place_schedule(&pg, c, &o, &r, &err), err);
  const int *pins = r.cand_device[GR_PLACE_CAND_PINS], *lay = r.cand_device[GR_PLACE_CAND_LAYERS];
  GR_CHECK(pins && lay && r.cand_device[GR_PLACE_CAND_ONE_TASK]);
  if (pins && lay) {
    GR_CHECK_EQ_INT(pins[0], 1); /* the session's first device */
    GR_CHECK_EQ_INT(pins[1], 1);
    GR_CHECK_EQ_INT(pins[3], 2); /* the first of {d0, d2} in the session order */
    GR_CHECK_EQ_INT(lay[0], 1);  /* layer 0: the session order's first */
    GR_CHECK_EQ_INT(lay[1], 2);  /* layer 1: its second */
    GR_CHECK_EQ_INT(lay[2], 1);  /* with its group's first member, not its layer's */
    GR_CHECK_EQ_INT(lay[3], 0);  /* layer 2: the third, which its pin allows */
  }
  for (int k = 0; k < GR_PLACE_CAND_COUNT; k++)
    if (r.cand_device[k]) GR_CHECK_EQ_INT(r.cand_device[k][2], r.cand_device[k][0]);
  GR_CHECK_NEAR(r.cand_time[GR_PLACE_CAND_PINS], 3, 1e-12); /* 0, 2 and 1 on d1; 3 on d2 */
  GR_CHECK_NEAR(r.cand_time[GR_PLACE_CAND_LAYERS], 2, 1e-12);
  GR_CHECK_NEAR(r.cand_time[GR_PLACE_CAND_ONE_TASK], 3, 1e-12);
  GR_CHECK_NEAR(r.cand_time[GR_PLACE_CAND_COST], 2, 1e-12);
  GR_CHECK_EQ_INT(r.chosen, GR_PLACE_CAND_COST);
  GR_CHECK_NEAR(r.step_time, 2, 1e-12);
  gr_place_result_free(&r);
  /* 2 s against pins only's 3 s: a 33% gain, kept with a margin of 30%, not of 40% */
  o.min_gain = 0.3;
  GR_CHECK_OK(gr_place_schedule(&pg, c, &o, &r, &err), err);
  GR_CHECK_EQ_INT(r.chosen, GR_PLACE_CAND_COST);
  gr_place_result_free(&r);
  o.min_gain = 0.4;
  GR_CHECK_OK(gr_place_schedule(&pg, c, &o, &r, &err), err);
  GR_CHECK_EQ_INT(r.chosen, GR_PLACE_CAND_PINS);
  GR_CHECK_NEAR(r.step_time, 3, 1e-12);
  GR_CHECK_EQ_INT(r.device[3], 2);
  GR_CHECK_EQ_INT(r.reason[0], GR_PLACE_CANDIDATE);
  gr_place_result_free(&r);
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

/* The local search: never slower than where it starts, within its budget,
 * groups whole, deterministic; on random layered graphs. */
static void test_search(void) {
  enum { N = 60, D = 3 };
  gr_cluster *c = gr_cluster_new();
  for (int d = 0; d < D; d++) task(c, "worker", "h", 0);
  links(c, 1e-4, 1e8, 0);
  uint64_t seed = 7;
  for (int trial = 0; trial < 5; trial++) {
    gr_place_graph pg;
    gr_error err;
    GR_CHECK_OK(gr_place_graph_init(&pg, N, 2 * N, &err), err);
    int e = 0, layer[N];
    for (int v = 0; v < N; v++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      pg.seconds[v] = 1e-3 * (1 + (double)(seed >> 60));
      layer[v] = v / 10;
      pg.in_off[v] = e;
      if (v >= 1) pg.in_src[e] = v - 1, pg.in_bytes[e++] = 1e4 * (double)((seed >> 40) % 50);
      if (v >= 10) pg.in_src[e] = v - 10, pg.in_bytes[e++] = 1e4 * (double)((seed >> 30) % 50);
      if (v % 7 == 3 && v > 7) pg.group[v] = v - 7;
    }
    for (int v = 0; v < N; v++) /* groups point at their smallest member */
      if (pg.group[v] != v && pg.group[pg.group[v]] != pg.group[v]) pg.group[v] = v;
    pg.in_off[N] = e;
    pg.num_edges = e;
    gr_place_options o = {.dataflow = true, .layer = layer};
    gr_place_result a, b, s;
    GR_CHECK_OK(gr_place_schedule(&pg, c, &o, &a, &err), err);
    o.search_budget = 200;
    GR_CHECK_OK(gr_place_schedule(&pg, c, &o, &s, &err), err);
    GR_CHECK_OK(gr_place_schedule(&pg, c, &o, &b, &err), err);
    GR_CHECK(s.step_time <= a.step_time * (1 + 1e-12));
    GR_CHECK(s.search_sims <= 200 && s.search_sims > 0);
    GR_CHECK(isfinite(s.search_time));
    GR_CHECK(memcmp(s.device, b.device, sizeof(int) * N) == 0); /* deterministic */
    GR_CHECK_NEAR(s.step_time, gr_place_simulate_dataflow(&pg, c, s.device, NULL), 1e-12);
    for (int v = 0; v < N; v++) GR_CHECK_EQ_INT(s.device[v], s.device[pg.group[v]]);
    gr_place_result_free(&a);
    gr_place_result_free(&b);
    gr_place_result_free(&s);
    gr_place_graph_free(&pg);
  }
  gr_cluster_free(c);
}

int main(void) {
  GR_RUN(test_threads_and_cores);
  GR_RUN(test_step_costs);
  GR_RUN(test_transfers);
  GR_RUN(test_dataflow_runs_what_is_ready);
  GR_RUN(test_outside_the_step);
  GR_RUN(test_candidates);
  GR_RUN(test_search);
  return gr_test_finish();
}
