/* The collective all-reduce in one process (devices CPU:0..n-1 of a local
 * session, the local rendezvous): gr_all_reduce on distinct pinned devices
 * builds one collective_all_reduce node per device; with the ring and with
 * the tree every device gets the same bits, equal to the sum made in that
 * algorithm's fixed order (the ring: chunk c added starting at rank c, the
 * same as the graph ring's, GRAPHRUN_ALL_REDUCE=graph; the tree: children
 * d + 1, d + 2, d + 4, ... added to rank d), run after run; 2-5 devices,
 * sizes 0, 1, 7 and 1000003, f32 and f64, sum and mean; small buckets take
 * the tree by default; chunks cut into several pieces with odd remainders
 * (GRAPHRUN_ALL_REDUCE_PIECE); buckets of several tensors; a group with a member
 * missing from the step fails with a named error; bad settings are named.
 * The same on real server processes: test_collective_dist.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphrun.h"
#include "gr_test.h"

static const char *dev_name(int d, char *buf) {
  snprintf(buf, 64, "/job:localhost/replica:0/task:0/device:CPU:%d", d);
  return buf;
}

/* Member d's value: odd fractions of mixed magnitude, so that the order of
 * the additions shows in the bits. */
static double value_at(int d, int64_t i) {
  uint64_t h =
      (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(d + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  double u = (double)(h >> 11) / 9007199254740992.0;
  return (u - 0.5) * (d % 2 ? 1e4 : 3.3) + 1.0 / 3.0;
}

static void fill(gr_tensor *t, int d) {
  for (int64_t i = 0; i < gr_tensor_num_elements(t); i++) gr_tensor_set_f64(t, i, value_at(d, i));
}

/* The tree's order: rank d adds the sums of its children d + 1, d + 2,
 * d + 4, ... (below its lowest set bit) to its own value. */
static float tree_f32(int d, int n, int64_t i) {
  float acc = (float)value_at(d, i);
  for (int m = 1; m < n && !(d & m); m <<= 1)
    if (d + m < n) acc = acc + tree_f32(d + m, n, i);
  return acc;
}
static double tree_f64(int d, int n, int64_t i) {
  double acc = value_at(d, i);
  for (int m = 1; m < n && !(d & m); m <<= 1)
    if (d + m < n) acc = acc + tree_f64(d + m, n, i);
  return acc;
}

/* The ring's order: chunk c (size / n elements, one more for the first
 * size % n) starts at rank c and goes around; or the tree's; a mean
 * divides the total. */
static void reference(gr_dtype dt, int n, int64_t size, bool mean, bool tree, gr_tensor *want) {
  gr_error e;
  gr_tensor_alloc(want, dt, &(gr_shape){1, {size}}, &e);
  int64_t q = size / n, r = size % n;
  for (int c = 0; c < n; c++) {
    int64_t off = c * q + (c < r ? c : r), len = q + (c < r);
    for (int64_t i = off; i < off + len; i++) {
      if (dt == GR_F32) {
        float acc = (float)value_at(c, i);
        for (int k = 1; k < n; k++) acc = (float)value_at((c + k) % n, i) + acc;
        if (tree) acc = tree_f32(0, n, i);
        if (mean) acc /= (float)n;
        ((float *)gr_tensor_data(want))[i] = acc;
      } else {
        double acc = value_at(c, i);
        for (int k = 1; k < n; k++) acc = value_at((c + k) % n, i) + acc;
        if (tree) acc = tree_f64(0, n, i);
        if (mean) acc /= (double)n;
        ((double *)gr_tensor_data(want))[i] = acc;
      }
    }
  }
}

static void quiet(void *arg, const char *msg) {
  (void)arg, (void)msg;
}

static int count_op(gr_graph *g, const char *op) {
  int k = 0;
  for (int id = 0; id < gr_graph_num_nodes(g); id++)
    k += !strcmp(gr_graph_node(g, id)->op->name, op);
  return k;
}

/* Builds and runs an all-reduce of `size` elements over n local devices,
 * `runs` times; out[d] gets device d's result of the last run. Checks
 * that every run gives the same bits. Returns the collective nodes built. */
static int all_reduce_local(int n, int64_t size, gr_dtype dt, bool mean, int runs, gr_tensor *out) {
  gr_graph *g = gr_graph_new();
  char devs[5][64];
  const char *dev[5];
  gr_output x[5], s[5];
  gr_tensor vals[5];
  gr_feed feeds[5];
  gr_error e;
  for (int d = 0; d < n; d++) {
    dev[d] = dev_name(d, devs[d]);
    gr_graph_push_device_scope(g, dev[d]);
    char name[8];
    snprintf(name, sizeof name, "x%d", d);
    x[d] = gr_placeholder(g, name, dt, (gr_shape){1, {size}});
    gr_graph_pop_device_scope(g);
    gr_tensor_alloc(&vals[d], dt, &(gr_shape){1, {size}}, &e);
    fill(&vals[d], d);
    feeds[d] = (gr_feed){x[d], &vals[d]};
  }
  GR_CHECK(gr_all_reduce(g, x, n, dev, mean ? GR_REDUCE_MEAN : GR_REDUCE_SUM, s) == GR_OK);
  int built = count_op(g, "collective_all_reduce");
  gr_session *ss = gr_session_new(g, &(gr_session_options){.num_devices = n}, &e);
  GR_CHECK_MSG(ss != NULL, "%s", e.msg);
  for (int run = 0; ss && run < runs; run++) {
    gr_tensor got[5];
    gr_status st = gr_session_run(ss, feeds, n, s, n, got, NULL, 0, &e);
    GR_CHECK_MSG(st == GR_OK, "%s", e.msg);
    if (st != GR_OK) break;
    for (int d = 0; d < n; d++) {
      if (run > 0)
        GR_CHECK_MSG(
            !memcmp(gr_tensor_data(&got[d]), gr_tensor_data(&out[d]), gr_tensor_num_bytes(&got[d])),
            "run %d differs from the first on device %d", run, d);
      if (run > 0) gr_tensor_release(&out[d]);
      out[d] = got[d];
    }
  }
  gr_session_free(ss);
  for (int d = 0; d < n; d++) gr_tensor_release(&vals[d]);
  gr_graph_free(g);
  return built;
}

static void release_all(gr_tensor *t, int n) {
  for (int d = 0; d < n; d++) gr_tensor_release(&t[d]);
}

static void check_case(int n, int64_t size, gr_dtype dt, bool mean, bool tree) {
  gr_tensor got[5], ring[5], want;
  setenv("GRAPHRUN_ALL_REDUCE", tree ? "tree" : "ring", 1);
  int built = all_reduce_local(n, size, dt, mean, 3, got);
  unsetenv("GRAPHRUN_ALL_REDUCE");
  GR_CHECK_MSG(built == n, "n=%d: %d collective nodes", n, built);
  reference(dt, n, size, mean, tree, &want);
  for (int d = 0; d < n; d++)
    GR_CHECK_MSG(
        gr_tensor_num_bytes(&got[d]) == gr_tensor_num_bytes(&want) &&
            !memcmp(gr_tensor_data(&got[d]), gr_tensor_data(&want), gr_tensor_num_bytes(&want)),
        "n=%d size=%lld %s%s %s: device %d differs from the sum in its order", n, (long long)size,
        gr_dtype_name(dt), mean ? " mean" : "", tree ? "tree" : "ring", d);
  release_all(got, n);
  if (!tree) { /* the graph ring adds in the same order: the same bits */
    setenv("GRAPHRUN_ALL_REDUCE", "graph", 1);
    built = all_reduce_local(n, size, dt, mean, 1, ring);
    unsetenv("GRAPHRUN_ALL_REDUCE");
    GR_CHECK_EQ_INT(built, 0);
    for (int d = 0; d < n; d++)
      GR_CHECK_MSG(
          !memcmp(gr_tensor_data(&ring[d]), gr_tensor_data(&want), gr_tensor_num_bytes(&want)),
          "n=%d size=%lld: the graph ring differs on device %d", n, (long long)size, d);
    release_all(ring, n);
  }
  gr_tensor_release(&want);
}

static void test_same_bits_2_to_5_devices(void) {
  const int64_t sizes[] = {0, 1, 7, 1000003};
  for (int tree = 0; tree < 2; tree++)
    for (int n = 2; n <= 5; n++)
      for (int k = 0; k < 4; k++) {
        check_case(n, sizes[k], GR_F32, false, tree);
        check_case(n, sizes[k], GR_F64, false, tree);
      }
}

static void test_mean(void) {
  check_case(3, 1001, GR_F32, true, false);
  check_case(4, 7, GR_F64, true, false);
  check_case(5, 1001, GR_F32, true, true);
  check_case(3, 7, GR_F64, true, true);
}

/* Chunks cut into several pieces (GRAPHRUN_ALL_REDUCE_PIECE: 4000 bytes,
 * 1000 f32 or 500 f64 elements; then 1 byte, a piece per element): chunks
 * of 3 pieces + 7 elements (one more on the first n - 1), whole pieces, and
 * one piece per element, each the same bits as the sum in the ring's
 * order; the tree ignores it. (A bad value: test_errors.) */
static void test_pieces(void) {
  setenv("GRAPHRUN_ALL_REDUCE_PIECE", "4000", 1);
  for (int n = 2; n <= 5; n++) {
    check_case(n, (int64_t)n * 3007 + n - 1, GR_F32, false, false);
    check_case(n, (int64_t)n * 3007 + n - 1, GR_F64, false, false);
  }
  check_case(3, 3 * 3000, GR_F32, false, false);
  check_case(4, 4 * 2001 + 1, GR_F32, true, false);
  check_case(3, 3 * 3007 + 2, GR_F64, true, false);
  check_case(3, 3 * 3007 + 2, GR_F32, false, true);
  setenv("GRAPHRUN_ALL_REDUCE_PIECE", "1", 1);
  check_case(3, 3 * 7 + 2, GR_F64, false, false);
  check_case(2, 9, GR_F32, true, false);
  unsetenv("GRAPHRUN_ALL_REDUCE_PIECE");
}

/* By default a bucket under 64 KiB on more than 2 devices takes the tree,
 * a larger one (or one on 2 devices) the ring. */
static void test_algorithm_by_size(void) {
  const struct {
    int n;
    int64_t size;
    const char *want;
  } cases[] = {{3, 7, "tree"}, {5, 16383, "tree"}, {3, 16384, "ring"}, {2, 7, "ring"}};
  for (int c = 0; c < 4; c++) {
    gr_graph *g = gr_graph_new();
    char devs[5][64];
    const char *dev[5];
    gr_output x[5], s[5];
    for (int d = 0; d < cases[c].n; d++) {
      dev[d] = dev_name(d, devs[d]);
      gr_graph_push_device_scope(g, dev[d]);
      x[d] = gr_placeholder(g, NULL, GR_F32, (gr_shape){1, {cases[c].size}});
      gr_graph_pop_device_scope(g);
    }
    GR_CHECK(gr_all_reduce_n(g, x, 1, cases[c].n, dev, GR_REDUCE_SUM, 1 << 20, s) == GR_OK);
    for (int d = 0; d < cases[c].n; d++)
      GR_CHECK_MSG(!strcmp(gr_node_attr_string(s[d].node, "algorithm", ""), cases[c].want),
                   "n=%d size=%lld: %s, want %s", cases[c].n, (long long)cases[c].size,
                   gr_node_attr_string(s[d].node, "algorithm", ""), cases[c].want);
    gr_graph_free(g);
  }
}

/* Several tensors of mixed sizes and dtypes through gr_all_reduce_n with
 * fusion: one node per device per bucket (a dtype per bucket; the bucket
 * size from GRAPHRUN_ALL_REDUCE_BUCKET), each result equal to the sum of
 * that tensor alone up to the order (exact here: integer values). */
static void test_buckets(void) {
  gr_graph *g = gr_graph_new();
  enum { N = 3, T = 5 };
  const int64_t sizes[T] = {10, 3, 1000, 7, 2};
  const gr_dtype dts[T] = {GR_F32, GR_F32, GR_F64, GR_F32, GR_F32};
  char devs[N][64];
  const char *dev[N];
  gr_output x[T * N], s[T * N];
  for (int d = 0; d < N; d++) dev[d] = dev_name(d, devs[d]);
  for (int t = 0; t < T; t++)
    for (int d = 0; d < N; d++) {
      gr_graph_push_device_scope(g, dev[d]);
      gr_tensor v;
      gr_error e;
      gr_tensor_alloc(&v, dts[t], &(gr_shape){1, {sizes[t]}}, &e);
      for (int64_t i = 0; i < sizes[t]; i++)
        gr_tensor_set_f64(&v, i, (double)(t * 100 + d * 10 + i));
      x[t * N + d] = gr_const(g, &v);
      gr_tensor_release(&v);
      gr_graph_pop_device_scope(g);
    }
  setenv("GRAPHRUN_ALL_REDUCE_BUCKET", "60", 1); /* 15 f32: tensors 0 and 1, then 3 and 4 */
  GR_CHECK(gr_all_reduce_n(g, x, T, N, dev, GR_REDUCE_SUM, 1 << 20, s) == GR_OK);
  unsetenv("GRAPHRUN_ALL_REDUCE_BUCKET");
  GR_CHECK_EQ_INT(count_op(g, "collective_all_reduce"), 3 * N);
  gr_error e;
  gr_session *ss = gr_session_new(g, &(gr_session_options){.num_devices = N}, &e);
  GR_CHECK_MSG(ss != NULL, "%s", e.msg);
  gr_tensor got[T * N];
  GR_CHECK_MSG(ss && gr_session_run(ss, NULL, 0, s, T * N, got, NULL, 0, &e) == GR_OK, "%s", e.msg);
  for (int t = 0; ss && t < T; t++)
    for (int d = 0; d < N; d++) {
      gr_tensor *v = &got[t * N + d];
      GR_CHECK_EQ_INT(v->dtype, dts[t]);
      GR_CHECK_EQ_INT(gr_tensor_num_elements(v), sizes[t]);
      for (int64_t i = 0; i < sizes[t]; i++)
        GR_CHECK_MSG(gr_tensor_get_f64(v, i) == (double)(3 * (t * 100 + i) + 30),
                     "tensor %d device %d [%lld] = %g", t, d, (long long)i,
                     gr_tensor_get_f64(v, i));
      gr_tensor_release(v);
    }
  gr_session_free(ss);
  gr_graph_free(g);
}

/* A step that needs one member but not the others fails at once, naming
 * the group and the missing rank (no hang); bad settings are named. */
static void test_errors(void) {
  gr_graph *g = gr_graph_new();
  char devs[2][64];
  const char *dev[2] = {dev_name(0, devs[0]), dev_name(1, devs[1])};
  gr_output x[2], s[2];
  for (int d = 0; d < 2; d++) {
    gr_graph_push_device_scope(g, dev[d]);
    x[d] = gr_const_f32(g, (float)d + 1);
    gr_graph_pop_device_scope(g);
  }
  GR_CHECK(gr_all_reduce(g, x, 2, dev, GR_REDUCE_SUM, s) == GR_OK);
  gr_graph_push_device_scope(g, dev[1]);
  gr_output y = gr_add(g, s[0], gr_const_f32(g, 1)); /* only rank 0's member */
  gr_graph_pop_device_scope(g);
  gr_error e;
  gr_session *ss = gr_session_new(g, &(gr_session_options){.num_devices = 2}, &e);
  gr_tensor out;
  GR_CHECK(ss && gr_session_run(ss, NULL, 0, &y, 1, &out, NULL, 0, &e) != GR_OK);
  GR_CHECK_STR_CONTAINS(e.msg, "rank 1 of 2 is not in this step");
  GR_CHECK_STR_CONTAINS(e.msg, "all_reduce/bucket_");
  gr_session_free(ss);

  setenv("GRAPHRUN_ALL_REDUCE_PIECE", "lots", 1); /* read by the kernels */
  ss = gr_session_new(g, &(gr_session_options){.num_devices = 2}, &e);
  gr_tensor got[2];
  GR_CHECK(ss && gr_session_run(ss, NULL, 0, s, 2, got, NULL, 0, &e) != GR_OK);
  GR_CHECK_STR_CONTAINS(e.msg, "GRAPHRUN_ALL_REDUCE_PIECE='lots'");
  unsetenv("GRAPHRUN_ALL_REDUCE_PIECE");
  gr_session_free(ss);

  setenv("GRAPHRUN_ALL_REDUCE_BUCKET", "lots", 1);
  GR_CHECK(gr_all_reduce(g, x, 2, dev, GR_REDUCE_SUM, s) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "GRAPHRUN_ALL_REDUCE_BUCKET='lots'");
  unsetenv("GRAPHRUN_ALL_REDUCE_BUCKET");
  gr_graph_clear_error(g);
  setenv("GRAPHRUN_ALL_REDUCE", "bush", 1);
  GR_CHECK(gr_all_reduce(g, x, 2, dev, GR_REDUCE_SUM, s) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "GRAPHRUN_ALL_REDUCE='bush'");
  unsetenv("GRAPHRUN_ALL_REDUCE");
  gr_graph_free(g);
}

/* Soft placement puts members together: all three on one device (a step
 * that is not partitioned: the session gives it a rendezvous), or two of
 * three on one device of two; the sums stay exact and the same on each. */
static void test_soft_placement(void) {
  for (int ndev = 1; ndev <= 2; ndev++) {
    gr_graph *g = gr_graph_new();
    const char *dev[3] = {"/job:worker/task:0", "/job:worker/task:1", "/job:worker/task:2"};
    if (ndev == 2) dev[0] = "/cpu:0", dev[1] = "/cpu:1", dev[2] = "/cpu:7";
    gr_output x[3], s[3];
    for (int d = 0; d < 3; d++) {
      gr_graph_push_device_scope(g, dev[d]);
      x[d] = gr_const_data(g, GR_F32, gr_shape_make(1, (int64_t[]){5}),
                           (float[]){(float)d, 1, 2, 3, (float)(10 * d)});
      gr_graph_pop_device_scope(g);
    }
    GR_CHECK(gr_all_reduce(g, x, 3, dev, GR_REDUCE_SUM, s) == GR_OK);
    GR_CHECK_EQ_INT(count_op(g, "collective_all_reduce"), 3);
    gr_error e;
    gr_session *ss = gr_session_new(
        g, &(gr_session_options){.num_devices = ndev, .soft_placement = true, .log_fn = quiet}, &e);
    gr_tensor r[3];
    GR_CHECK_MSG(ss && gr_session_run(ss, NULL, 0, s, 3, r, NULL, 0, &e) == GR_OK, "%d devices: %s",
                 ndev, e.msg);
    for (int d = 0; ss && d < 3; d++) {
      const float want[5] = {3, 3, 6, 9, 30};
      GR_CHECK_MSG(!memcmp(gr_tensor_data(&r[d]), want, sizeof want), "%d devices: member %d", ndev,
                   d);
      gr_tensor_release(&r[d]);
    }
    gr_session_free(ss);
    gr_graph_free(g);
  }
}

int main(void) {
  unsetenv("GRAPHRUN_ALL_REDUCE");
  unsetenv("GRAPHRUN_ALL_REDUCE_BUCKET");
  unsetenv("GRAPHRUN_ALL_REDUCE_PIECE");
  GR_RUN(test_same_bits_2_to_5_devices);
  GR_RUN(test_mean);
  GR_RUN(test_pieces);
  GR_RUN(test_algorithm_by_size);
  GR_RUN(test_buckets);
  GR_RUN(test_errors);
  GR_RUN(test_soft_placement);
  return gr_test_finish();
}
