/* The simulated greedy placer on small compact graphs whose best placement
 * is known by hand, and a property test on random DAGs: never slower than
 * the best single device or the pins alone, never faster than the lower
 * bound, deterministic, and its reported time is what the simulator says. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "placer/gr_placer.h"

#define RATE 1e9 /* flop/s: 1e6 flops = 1 ms */

/* A cluster of n devices, one task each on one host, with this link. */
static gr_cluster *cluster(int n, double latency, double bandwidth) {
  gr_cluster *c = gr_cluster_new();
  for (int i = 0; i < n; i++) {
    int t;
    gr_cluster_add_task(c, "worker", "h", &t, NULL);
    gr_cluster_add_device(c, t, RATE, 1e15, 0, NULL);
  }
  for (int k = 0; k < GR_LINK_COUNT; k++)
    gr_cluster_set_link(c, (gr_link_kind)k, (gr_link){.latency = latency, .bandwidth = bandwidth});
  return c;
}

/* Builds a graph from an edge list (src, dst, bytes); flops per node. */
static void make(gr_place_graph *pg, int n, const double *flops, const int (*edges)[2],
                 const double *bytes, int ne) {
  gr_error err;
  GR_CHECK_OK(gr_place_graph_init(pg, n, ne, &err), err);
  int e = 0;
  for (int v = 0; v < n; v++) {
    pg->flops[v] = flops[v];
    pg->in_off[v] = e;
    for (int k = 0; k < ne; k++)
      if (edges[k][1] == v) {
        pg->in_src[e] = edges[k][0];
        pg->in_bytes[e++] = bytes[k];
      }
  }
  pg->in_off[n] = e;
}

/* Two independent heavy branches below a cheap source go to different devices. */
static void test_branches_go_apart(void) {
  /* 0 -> 1 -> 2 and 0 -> 3 -> 4, join at 5 */
  double flops[] = {1e3, 1e7, 1e7, 1e7, 1e7, 1e3};
  const int edges[][2] = {{0, 1}, {1, 2}, {0, 3}, {3, 4}, {2, 5}, {4, 5}};
  double bytes[] = {1e3, 1e3, 1e3, 1e3, 1e3, 1e3};
  gr_place_graph pg;
  make(&pg, 6, flops, edges, bytes, 6);
  gr_cluster *c = cluster(2, 1e-6, 1e9);
  gr_place_result r;
  gr_error err;
  GR_CHECK_OK(gr_place_schedule(&pg, c, NULL, &r, &err), err);
  GR_CHECK_EQ_INT(r.device[1], r.device[2]);
  GR_CHECK_EQ_INT(r.device[3], r.device[4]);
  GR_CHECK(r.device[1] != r.device[3]);
  GR_CHECK(!r.fell_back);
  /* two 20 ms branches in parallel: about 20 ms, not 40 */
  GR_CHECK(r.step_time < 0.0205);
  GR_CHECK_NEAR(r.baseline_time, 0.040002, 1e-6);
  GR_CHECK(r.cross_bytes > 0);
  gr_place_result_free(&r);
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

/* A chain whose transfers cost more than its compute stays on one device,
 * even when a side branch pulls work elsewhere. */
static void test_chain_stays_together(void) {
  enum { N = 12 };
  double flops[N];
  int edges[N - 1][2];
  double bytes[N - 1];
  for (int i = 0; i < N; i++) flops[i] = 1e6;
  for (int i = 0; i + 1 < N; i++) edges[i][0] = i, edges[i][1] = i + 1, bytes[i] = 1e8; /* 100 ms */
  gr_place_graph pg;
  make(&pg, N, flops, (const int(*)[2])edges, bytes, N - 1);
  gr_cluster *c = cluster(4, 1e-5, 1e9);
  gr_place_result r;
  gr_error err;
  GR_CHECK_OK(gr_place_schedule(&pg, c, NULL, &r, &err), err);
  for (int i = 1; i < N; i++) GR_CHECK_EQ_INT(r.device[i], r.device[0]);
  GR_CHECK_NEAR(r.step_time, N * 1e-3, 1e-9);
  GR_CHECK_NEAR(r.cross_bytes, 0, 0);
  gr_place_result_free(&r);
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

/* A pinned middle layer pulls its producer and its consumers to its device
 * when transfers are expensive. */
static void test_pinned_layer_pulls_neighbours(void) {
  /* 0 -> 1 -> {2, 3} -> 4, node 2 and 3 pinned to device 2 */
  double flops[] = {1e6, 1e6, 1e6, 1e6, 1e6};
  const int edges[][2] = {{0, 1}, {1, 2}, {1, 3}, {2, 4}, {3, 4}};
  double bytes[] = {1e8, 1e8, 1e8, 1e8, 1e8};
  gr_place_graph pg;
  make(&pg, 5, flops, edges, bytes, 5);
  int pin = 2;
  int set = gr_place_graph_add_allow_set(&pg, 3, &pin, 1);
  pg.allow[2] = pg.allow[3] = set;
  gr_cluster *c = cluster(3, 1e-5, 1e9);
  gr_place_result r;
  gr_error err;
  GR_CHECK_OK(gr_place_schedule(&pg, c, NULL, &r, &err), err);
  for (int v = 0; v < 5; v++) GR_CHECK_EQ_INT(r.device[v], 2);
  GR_CHECK_EQ_INT(r.reason[2], GR_PLACE_PINNED);
  GR_CHECK_NEAR(r.step_time, 5e-3, 1e-9);
  gr_place_result_free(&r);
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

/* Colocation groups move as one; pins are honoured exactly. */
static void test_groups_and_pins(void) {
  double flops[] = {1e6, 1e6, 1e6, 1e6};
  const int edges[][2] = {{0, 1}, {0, 2}, {2, 3}};
  double bytes[] = {1, 1, 1};
  gr_place_graph pg;
  make(&pg, 4, flops, edges, bytes, 3);
  pg.group[3] = 1; /* 1 and 3 together */
  int pin = 3;
  pg.allow[1] = pg.allow[3] = gr_place_graph_add_allow_set(&pg, 4, &pin, 1);
  pg.group[1] = 1;
  gr_cluster *c = cluster(4, 1e-6, 1e9);
  gr_place_result r;
  gr_error err;
  GR_CHECK_OK(gr_place_schedule(&pg, c, NULL, &r, &err), err);
  GR_CHECK_EQ_INT(r.device[1], 3);
  GR_CHECK_EQ_INT(r.device[3], 3);
  gr_place_result_free(&r);
  /* a group whose allowed set is empty is refused */
  pg.allow[1] = pg.allow[3] = gr_place_graph_add_allow_set(&pg, 4, NULL, 0);
  GR_CHECK(gr_place_schedule(&pg, c, NULL, &r, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "no device");
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

static void test_bad_graphs(void) {
  gr_place_graph pg;
  gr_error err;
  GR_CHECK_OK(gr_place_graph_init(&pg, 2, 1, &err), err);
  pg.in_off[1] = 0;
  pg.in_off[2] = 1;
  pg.in_src[0] = 1; /* node 1 reads itself: not topological */
  gr_cluster *c = cluster(2, 0, 1e9);
  gr_place_result r;
  GR_CHECK(gr_place_schedule(&pg, c, NULL, &r, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "topological");
  pg.in_src[0] = 0;
  pg.in_bytes[0] = -1;
  GR_CHECK(gr_place_schedule(&pg, c, NULL, &r, &err) == GR_ERR_INVALID_ARGUMENT);
  pg.in_bytes[0] = 1;
  pg.group[1] = 5;
  GR_CHECK(gr_place_schedule(&pg, c, NULL, &r, &err) == GR_ERR_INVALID_ARGUMENT);
  pg.group[1] = 1;
  pg.flops[0] = NAN;
  GR_CHECK(gr_place_schedule(&pg, c, NULL, &r, &err) == GR_ERR_INVALID_ARGUMENT);
  pg.flops[0] = 1;
  GR_CHECK_OK(gr_place_schedule(&pg, c, NULL, &r, &err), err);
  gr_place_result_free(&r);
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

static uint64_t rs = 99;
static double urand(void) {
  rs = rs * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rs >> 11) * 0x1.0p-53;
}

/* A layered graph of n nodes in rows of w: node (l, i) computes
 * scale * (0.5 to 1.5) flops and reads, for each d of ds[0..nd), node
 * (l - 1, i + d) around the row, an edge of `bytes` bytes (0: as many as
 * the producer's flops). */
static void layered(gr_place_graph *pg, int w, int n, double scale, const int *ds, int nd,
                    double bytes) {
  gr_error err;
  GR_CHECK_OK(gr_place_graph_init(pg, n, 3 * n, &err), err);
  int e = 0;
  for (int v = 0; v < n; v++) {
    pg->flops[v] = scale * (0.5 + urand());
    pg->in_off[v] = e;
    if (v >= w) {
      int l = v / w - 1, i = v % w;
      for (int k = 0; k < nd; k++) {
        int u = l * w + (i + ds[k] + w) % w;
        pg->in_src[e] = u, pg->in_bytes[e++] = bytes ? bytes : pg->flops[u];
      }
    }
  }
  pg->in_off[n] = e;
  pg->num_edges = e;
}

/* Random DAGs, random costs, random pins and groups, heterogeneous devices. */
static void test_random_dags_property(void) {
  int worse = 0, below_lb = 0, mismatch = 0, nondet = 0, by_locality = 0;
  for (int it = 0; it < 150; it++) {
    int n = 5 + (int)(urand() * 120), D = 2 + (int)(urand() * 5);
    gr_place_graph pg;
    gr_error err;
    GR_CHECK_OK(gr_place_graph_init(&pg, n, n * 3, &err), err);
    int e = 0;
    double ratio = pow(10, urand() * 3 - 1.5);
    for (int v = 0; v < n; v++) {
      pg.flops[v] = urand() < 0.1 ? 0 : 1e6 * (0.2 + urand());
      pg.bytes[v] = 1e6 * urand();
      pg.in_off[v] = e;
      int k = v ? (int)(urand() * 4) : 0;
      for (int j = 0; j < k; j++) {
        pg.in_src[e] = (int)(urand() * v);
        pg.in_bytes[e++] = ratio * 1e6 * urand();
      }
    }
    pg.in_off[n] = e;
    pg.num_edges = e;
    gr_cluster *c = gr_cluster_new();
    for (int d = 0; d < D; d++) {
      int t;
      gr_cluster_add_task(c, d % 2 ? "ps" : "worker", d < D / 2 ? "a" : "b", &t, NULL);
      gr_cluster_add_device(c, t, RATE * (0.5 + urand()), 1e9, 1e-6, NULL);
    }
    /* some pins and groups */
    if (it % 3 == 0) {
      int devs[2] = {0, D - 1};
      int set = gr_place_graph_add_allow_set(&pg, D, devs, 1 + it % 2);
      for (int v = 0; v < n; v++)
        if (urand() < 0.1) pg.allow[v] = set;
      for (int v = 1; v < n; v++)
        if (urand() < 0.1) {
          int g = pg.group[(int)(urand() * v)];
          pg.group[v] = g;
          pg.allow[g] = set; /* the representative carries the group's set */
        }
    }
    gr_place_result r, r2;
    GR_CHECK_OK(gr_place_schedule(&pg, c, NULL, &r, &err), err);
    GR_CHECK_OK(gr_place_schedule(&pg, c, NULL, &r2, &err), err);
    double lb = gr_place_lower_bound(&pg, c);
    if (r.step_time > r.baseline_time * (1 + 1e-12)) worse++;
    if (r.step_time < lb * (1 - 1e-9)) below_lb++;
    double sim = gr_place_simulate(&pg, c, r.device, NULL);
    if (fabs(sim - r.step_time) > 1e-12 * fmax(1, sim)) mismatch++;
    by_locality += r.by_locality;
    if (r.by_locality) GR_CHECK(r.locality_time < r.greedy_time && r.step_time == r.locality_time);
    GR_CHECK(!(r.by_locality && r.fell_back));
    for (int v = 0; v < n; v++) {
      if (r.reason[v] == GR_PLACE_LOCALITY) GR_CHECK(r.by_locality);
      if (r.reason[v] == GR_PLACE_CONSUMER) /* a free source sits with the consumer named */
        GR_CHECK(r.cause[v] < 0 || r.device[v] == r.device[r.cause[v]]);
    }
    if (memcmp(r.device, r2.device, sizeof(int) * (size_t)n) != 0 || r.step_time != r2.step_time)
      nondet++;
    /* groups together, pins honoured */
    for (int v = 0; v < n; v++) {
      GR_CHECK_EQ_INT(r.device[v], r.device[pg.group[v]]);
      int set = pg.allow[pg.group[v]];
      if (set >= 0) {
        int d = r.device[v];
        GR_CHECK(
            (pg.allow_bits[(size_t)set * (size_t)pg.allow_words + (size_t)d / 64] >> (d % 64)) & 1);
      }
    }
    gr_place_result_free(&r);
    gr_place_result_free(&r2);
    gr_place_graph_free(&pg);
    gr_cluster_free(c);
  }
  GR_CHECK_EQ_INT(worse, 0);
  GR_CHECK_EQ_INT(below_lb, 0);
  GR_CHECK_EQ_INT(mismatch, 0);
  GR_CHECK_EQ_INT(nondet, 0);
  GR_CHECK_MSG(by_locality > 0, "the locality placement never won in 150 random graphs");
}

/* A layered graph (width 16, node (l, i) reads (l-1, i-1), (l-1, i),
 * (l-1, i+1) around the ring; nodes take 0.5-1.5 ms) where sending a tensor
 * takes as long as computing its producer, on 8 devices: the greedy placer
 * spreads consumers away from their producers; the locality placement cuts
 * the layers into column strips, two columns per device, and wins. (With
 * all nodes equal the strips lose in the simulator: every device waits for
 * its neighbour at the same moment and the transfers queue around the ring.) */
static void test_locality_strips(void) {
  enum { W = 16, L = 40, N = W * L, D = 8 };
  gr_place_graph pg;
  gr_error err;
  layered(&pg, W, N, 1e6, (const int[]){-1, 0, 1}, 3, 0); /* 1 GB/s: as long as u's compute */
  gr_cluster *c = cluster(D, 1e-6, 1e9);
  gr_place_result r;
  GR_CHECK_OK(gr_place_schedule(&pg, c, NULL, &r, &err), err);
  GR_CHECK(r.by_locality && !r.fell_back);
  GR_CHECK(r.step_time < r.greedy_time);
  for (int v = 0; v < N; v++) {
    GR_CHECK_MSG(r.device[v] == (v % W) * D / W, "node (%d, %d) on d%d", v / W, v % W, r.device[v]);
    GR_CHECK_EQ_INT(r.reason[v], GR_PLACE_LOCALITY);
  }
  GR_CHECK_NEAR(r.step_time, gr_place_simulate(&pg, c, r.device, NULL), 1e-12);
  gr_place_result_free(&r);
  /* no_fallback returns the greedy placement itself */
  gr_place_options o = {.no_fallback = true};
  GR_CHECK_OK(gr_place_schedule(&pg, c, &o, &r, &err), err);
  GR_CHECK(!r.by_locality && r.step_time == r.greedy_time);
  gr_place_result_free(&r);
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

/* Two chains whose every edge is expensive, joined at the end: the greedy
 * placer runs them apart (the myopic choice) and then pays a huge transfer
 * at the join; one device is far faster, so it falls back. With fallback
 * disabled the greedy placement comes back. */
static void test_fallback(void) {
  double flops[] = {1e6, 1e6, 1e6, 1e6, 1e6, 1e6, 1e6};
  const int edges[][2] = {{0, 1}, {1, 2}, {3, 4}, {4, 5}, {2, 6}, {5, 6}};
  double bytes[] = {1e8, 1e8, 1e8, 1e8, 1e8, 1e8};
  gr_place_graph pg;
  make(&pg, 7, flops, edges, bytes, 6);
  gr_cluster *c = cluster(2, 1e-6, 1e8); /* 1 s per transfer, 1 ms per node */
  gr_place_result r;
  gr_error err;
  GR_CHECK_OK(gr_place_schedule(&pg, c, NULL, &r, &err), err);
  GR_CHECK(r.step_time <= r.baseline_time);
  GR_CHECK(r.step_time <= r.greedy_time);
  GR_CHECK_NEAR(r.step_time, 7e-3, 1e-9); /* everything on one device */
  for (int v = 0; v < 7; v++) GR_CHECK_EQ_INT(r.reason[v], GR_PLACE_FALLBACK);
  GR_CHECK_NEAR(r.step_time, gr_place_simulate(&pg, c, r.device, NULL), 1e-12);
  bool fell_back = r.fell_back;
  double greedy = r.greedy_time;
  gr_place_result_free(&r);
  gr_place_options o = {.no_fallback = true};
  GR_CHECK_OK(gr_place_schedule(&pg, c, &o, &r, &err), err);
  GR_CHECK(!r.fell_back);
  GR_CHECK_NEAR(r.step_time, greedy, 0);
  GR_CHECK_NEAR(r.step_time, gr_place_simulate(&pg, c, r.device, NULL), 1e-12);
  GR_CHECK(fell_back);
  GR_CHECK(greedy > 1.0);
  gr_place_result_free(&r);
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

/* Large graphs run the two greedy variants on two threads, then the
 * candidates beside the locality placement: same answer as the simulator
 * (each candidate's too), deterministic. */
static void test_large_graph(void) {
  enum { W = 16, N = 60000 };
  gr_place_graph pg;
  gr_error err;
  layered(&pg, W, N, 1e5, (const int[]){0, 1}, 2, 1e4);
  gr_cluster *c = cluster(4, 1e-6, 1e9);
  gr_place_result r, r2;
  GR_CHECK_OK(gr_place_schedule(&pg, c, NULL, &r, &err), err);
  GR_CHECK_OK(gr_place_schedule(&pg, c, NULL, &r2, &err), err);
  GR_CHECK(memcmp(r.device, r2.device, sizeof(int) * N) == 0);
  GR_CHECK_NEAR(r.step_time, gr_place_simulate(&pg, c, r.device, NULL), 1e-12);
  GR_CHECK(r.step_time <= r.baseline_time);
  /* 4 devices, cheap transfers: close to the lower bound */
  GR_CHECK(r.step_time < 1.2 * gr_place_lower_bound(&pg, c));
  int rated = 0;
  for (int k = 0; k < GR_PLACE_CAND_COUNT; k++) {
    if (!r.cand_device[k]) continue;
    GR_CHECK_NEAR(r.cand_time[k], gr_place_simulate(&pg, c, r.cand_device[k], NULL), 1e-12);
    GR_CHECK_NEAR(r.cand_time[k], r2.cand_time[k], 0);
    rated++;
  }
  GR_CHECK(rated >= 2); /* the cost placement and one task at least */
  GR_CHECK_NEAR(r.baseline_time, r.cand_time[GR_PLACE_CAND_ONE_TASK], 0);
  gr_place_result_free(&r);
  gr_place_result_free(&r2);
  gr_place_graph_free(&pg);
  gr_cluster_free(c);
}

int main(void) {
  GR_RUN(test_branches_go_apart);
  GR_RUN(test_chain_stays_together);
  GR_RUN(test_pinned_layer_pulls_neighbours);
  GR_RUN(test_groups_and_pins);
  GR_RUN(test_bad_graphs);
  GR_RUN(test_random_dags_property);
  GR_RUN(test_fallback);
  GR_RUN(test_locality_strips);
  GR_RUN(test_large_graph);
  return gr_test_finish();
}
