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
 * missing from the step fails with a named error; bad settings are named;
 * beside every all-reduce above, its twin with SGD fused in updates each
 * element of each member's variable by its total once per run (ring,
 * tree, hierarchical with hosts, pieces, mean); SGD fused into the
 * all-reduce of mirrored variables gives the unfused update's bits, and
 * the unfused all-reduce left in the graph does not run.
 * The same on real server processes: test_collective_dist.c. */
#include <math.h>
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

/* Beside each collective node of g, its twin with SGD fused in
 * (collective_all_reduce_sgd, its own group) updating a variable v_d of
 * zeros on the member's device at learning rate 1; v[d] those variables,
 * sgd[d] the twins. */
static void sgd_twins(gr_graph *g, int n, int64_t size, gr_dtype dt, gr_output *v, gr_output *sgd) {
  int members = 0;
  for (int id = 0, total = gr_graph_num_nodes(g); id < total; id++) {
    gr_node *nd = gr_graph_node(g, id);
    if (strcmp(nd->op->name, "collective_all_reduce") != 0) continue;
    int d = (int)gr_node_attr_int(nd, "rank", 0);
    char name[16], key[256];
    snprintf(name, sizeof name, "v_%d", d);
    snprintf(key, sizeof key, "%s/sgd", gr_node_attr_string(nd, "group_key", ""));
    gr_attr a[16];
    int na = 0;
    for (int k = 0; k < nd->num_attrs && na < 14; k++)
      a[na++] =
          strcmp(nd->attrs[k].name, "group_key") ? nd->attrs[k] : gr_attr_string("group_key", key);
    a[na++] = gr_attr_string("apply_vars", name);
    a[na++] = gr_attr_float("learning_rate", 1);
    gr_graph_push_device_scope(g, nd->requested_device);
    v[d] = gr_variable(g, name, gr_zeros(g, dt, (gr_shape){1, {size}}));
    sgd[d] = gr_op(g, "collective_all_reduce_sgd", NULL, nd->inputs, nd->num_inputs, a, na);
    gr_graph_pop_device_scope(g);
    members++;
  }
  GR_CHECK_EQ_INT(members, n);
  GR_CHECK_MSG(gr_graph_error(g) == NULL, "%s", gr_graph_error(g) ? gr_graph_error(g)->msg : "");
}

/* Each run's totals taken from v[d] by the fused update (v -= 1 * total,
 * in v's dtype): *want the value v[d] must hold after it. */
static void check_sgd_run(gr_session *ss, const gr_output *v, int n, const gr_tensor *got,
                          gr_tensor *want, int run) {
  gr_tensor now[5];
  gr_error e;
  GR_CHECK_MSG(gr_session_run(ss, NULL, 0, v, n, now, NULL, 0, &e) == GR_OK, "%s", e.msg);
  for (int d = 0; d < n; d++) {
    int64_t m = gr_tensor_num_elements(&got[d]);
    if (got[d].dtype == GR_F32)
      for (int64_t i = 0; i < m; i++)
        ((float *)gr_tensor_data(&want[d]))[i] -= ((const float *)gr_tensor_data(&got[d]))[i];
    else
      for (int64_t i = 0; i < m; i++)
        ((double *)gr_tensor_data(&want[d]))[i] -= ((const double *)gr_tensor_data(&got[d]))[i];
    GR_CHECK_MSG(
        !memcmp(gr_tensor_data(&now[d]), gr_tensor_data(&want[d]), gr_tensor_num_bytes(&want[d])),
        "run %d: member %d's variable is not its old value - the total (each element "
        "updated once)",
        run, d);
    gr_tensor_release(&now[d]);
  }
}

/* Builds and runs an all-reduce of `size` elements over n local devices,
 * `runs` times; out[d] gets device d's result of the last run. Checks
 * that every run gives the same bits, and that the same all-reduce with
 * SGD fused in (sgd_twins) updates every element of each member's
 * variable by its total exactly once per run. Returns the collective
 * nodes built. */
static int all_reduce_with(int n, int64_t size, gr_dtype dt, bool mean, int runs,
                           const gr_all_reduce_options *o, gr_tensor *out) {
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
  GR_CHECK(gr_all_reduce_with(g, x, 1, n, dev, mean ? GR_REDUCE_MEAN : GR_REDUCE_SUM, 0, o, s) ==
           GR_OK);
  int built = count_op(g, "collective_all_reduce");
  gr_output v[5], sgd[5];
  gr_tensor want[5];
  sgd_twins(g, built, size, dt, v, sgd);
  for (int d = 0; d < built; d++) {
    gr_tensor_alloc(&want[d], dt, &(gr_shape){1, {size}}, &e);
    memset(gr_tensor_data(&want[d]), 0, gr_tensor_num_bytes(&want[d]));
  }
  gr_session *ss = gr_session_new(g, &(gr_session_options){.num_devices = n}, &e);
  GR_CHECK_MSG(ss != NULL, "%s", e.msg);
  /* the update names its variables in attr apply_vars, which does not
   * initialise them: a read does (as minimize's forward pass does) */
  GR_CHECK(!ss || gr_session_run(ss, NULL, 0, NULL, 0, NULL, v, built, &e) == GR_OK);
  for (int run = 0; ss && run < runs; run++) {
    gr_tensor got[5];
    gr_status st = gr_session_run(ss, feeds, n, s, n, got, sgd, built, &e);
    GR_CHECK_MSG(st == GR_OK, "%s", e.msg);
    if (st != GR_OK) break;
    if (built == n) check_sgd_run(ss, v, n, got, want, run);
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
  for (int d = 0; d < built; d++) gr_tensor_release(&want[d]);
  gr_graph_free(g);
  return built;
}

static int all_reduce_local(int n, int64_t size, gr_dtype dt, bool mean, int runs, gr_tensor *out) {
  return all_reduce_with(n, size, dt, mean, runs, NULL, out);
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
  /* a bucket's outputs view its flat buffer: tensor 1 right after tensor 0,
   * tensor 4 after 3, no copy out */
  for (int d = 0; ss && d < N; d++)
    for (int t = 0; t < T; t += 3) {
      const gr_tensor *a = &got[t * N + d], *b = &got[(t + 1) * N + d];
      GR_CHECK_MSG(a->buf == b->buf && b->offset == a->offset + gr_tensor_num_bytes(a),
                   "device %d: tensors %d and %d are not views of one buffer", d, t, t + 1);
    }
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

/* The options in the graph: the piece size and the hierarchy are attrs of
 * every member's node, the same on each, from gr_all_reduce_options or
 * the environment, which overrides them; the bucket size from the
 * options. The kernels no longer read the environment: a bad
 * GRAPHRUN_ALL_REDUCE_PIECE while the step runs changes nothing. */
static void test_options_in_graph(void) {
  gr_graph *g = gr_graph_new();
  char devs[3][64];
  const char *dev[3];
  gr_output x[3], s[3];
  for (int d = 0; d < 3; d++) {
    dev[d] = dev_name(d, devs[d]);
    gr_graph_push_device_scope(g, dev[d]);
    x[d] = gr_const_data(g, GR_F32, gr_shape_make(1, (int64_t[]){3}), (float[]){1, 2, (float)d});
    gr_graph_pop_device_scope(g);
  }
  gr_all_reduce_options o = {.algorithm = "ring", .piece_bytes = 4};
  GR_CHECK(gr_all_reduce_with(g, x, 1, 3, dev, GR_REDUCE_SUM, 0, &o, s) == GR_OK);
  for (int d = 0; d < 3; d++) {
    GR_CHECK_EQ_INT(gr_node_attr_int(s[d].node, "piece_bytes", -1), 4);
    GR_CHECK_STR_CONTAINS(gr_node_attr_string(s[d].node, "hierarchy", ""), "flat");
    GR_CHECK_STR_CONTAINS(gr_node_attr_string(s[d].node, "algorithm", ""), "ring");
  }
  setenv("GRAPHRUN_ALL_REDUCE_PIECE", "8", 1); /* overrides the option */
  setenv("GRAPHRUN_ALL_REDUCE", "hier", 1);
  gr_output h[3];
  GR_CHECK(gr_all_reduce_with(g, x, 1, 3, dev, GR_REDUCE_SUM, 0, &o, h) == GR_OK);
  unsetenv("GRAPHRUN_ALL_REDUCE");
  unsetenv("GRAPHRUN_ALL_REDUCE_PIECE");
  for (int d = 0; d < 3; d++) {
    GR_CHECK_EQ_INT(gr_node_attr_int(h[d].node, "piece_bytes", -1), 8);
    GR_CHECK_STR_CONTAINS(gr_node_attr_string(h[d].node, "hierarchy", ""), "hosts");
  }
  gr_error e;
  gr_session *ss = gr_session_new(g, &(gr_session_options){.num_devices = 3}, &e);
  setenv("GRAPHRUN_ALL_REDUCE_PIECE", "lots", 1); /* the kernels do not read it */
  gr_tensor got[6];
  gr_output both[6] = {s[0], s[1], s[2], h[0], h[1], h[2]};
  GR_CHECK_MSG(ss && gr_session_run(ss, NULL, 0, both, 6, got, NULL, 0, &e) == GR_OK, "%s", e.msg);
  unsetenv("GRAPHRUN_ALL_REDUCE_PIECE");
  for (int d = 0; ss && d < 6; d++) {
    const float want[3] = {3, 6, 3};
    GR_CHECK_MSG(!memcmp(gr_tensor_data(&got[d]), want, sizeof want), "member %d", d);
    gr_tensor_release(&got[d]);
  }
  gr_session_free(ss);
  gr_graph_free(g);

  /* the bucket from the options (the environment's test: test_buckets) */
  g = gr_graph_new();
  gr_output y[6], r[6];
  for (int t = 0; t < 2; t++)
    for (int d = 0; d < 3; d++) {
      gr_graph_push_device_scope(g, dev[d]);
      y[t * 3 + d] = gr_const_data(g, GR_F32, gr_shape_make(1, (int64_t[]){2}), (float[]){1, 2});
      gr_graph_pop_device_scope(g);
    }
  o = (gr_all_reduce_options){.bucket_bytes = 8}; /* one tensor each */
  GR_CHECK(gr_all_reduce_with(g, y, 2, 3, dev, GR_REDUCE_SUM, 1 << 20, &o, r) == GR_OK);
  GR_CHECK_EQ_INT(count_op(g, "collective_all_reduce"), 6);
  o.bucket_bytes = 16; /* both in one */
  GR_CHECK(gr_all_reduce_with(g, y, 2, 3, dev, GR_REDUCE_SUM, 1 << 20, &o, r) == GR_OK);
  GR_CHECK_EQ_INT(count_op(g, "collective_all_reduce"), 9);
  gr_graph_free(g);
}

/* The hierarchical order over hosts host[0..n) (numbered by first member):
 * inside host h a tree over its members in rank order (local i adds i + 1,
 * i + 2, i + 4, ...), then over the hosts' sums the ring (chunk c starting
 * at host c) or the tree; a mean divided at the end. */
static double host_tree(const int *mem, int k, int i, int64_t i_el, bool f32) {
  double acc = value_at(mem[i], i_el);
  if (f32) acc = (float)acc;
  for (int m = 1; m < k && !(i & m); m <<= 1)
    if (i + m < k) {
      acc = acc + host_tree(mem, k, i + m, i_el, f32);
      if (f32) acc = (float)acc;
    }
  return acc;
}

static double leaders_tree(const double *hs, int nh, int h, bool f32) {
  double acc = hs[h];
  for (int m = 1; m < nh && !(h & m); m <<= 1)
    if (h + m < nh) {
      acc = acc + leaders_tree(hs, nh, h + m, f32);
      if (f32) acc = (float)acc;
    }
  return acc;
}

static void hier_reference(gr_dtype dt, int n, const int *host, int64_t size, bool mean, bool tree,
                           gr_tensor *want) {
  gr_error e;
  bool f32 = dt == GR_F32;
  int nh = 0, mem[5][5], k[5] = {0};
  for (int d = 0; d < n; d++) {
    if (host[d] + 1 > nh) nh = host[d] + 1;
    mem[host[d]][k[host[d]]++] = d;
  }
  gr_tensor_alloc(want, dt, &(gr_shape){1, {size}}, &e);
  int64_t q = size / nh, r = size % nh;
  for (int c = 0; c < nh; c++)
    for (int64_t i = c * q + (c < r ? c : r); i < (c + 1) * q + (c + 1 < r ? c + 1 : r); i++) {
      double hs[5];
      for (int h = 0; h < nh; h++) hs[h] = host_tree(mem[h], k[h], 0, i, f32);
      double acc = hs[c];
      for (int j = 1; j < nh; j++) {
        acc = hs[(c + j) % nh] + acc;
        if (f32) acc = (float)acc;
      }
      if (tree) acc = leaders_tree(hs, nh, 0, f32);
      if (f32)
        ((float *)gr_tensor_data(want))[i] = mean ? (float)acc / (float)n : (float)acc;
      else
        ((double *)gr_tensor_data(want))[i] = mean ? acc / n : acc;
    }
}

/* Runs the hierarchical all-reduce over n local devices grouped as host[]
 * (gr_all_reduce_options.hosts; algorithm: "hier", or NULL: chosen) and
 * checks every member against the hierarchical order, three runs each. */
static void check_hier(int n, const int *host, int64_t size, gr_dtype dt, bool mean,
                       const char *algorithm) {
  static const char *const names[] = {"hostA", "hostB", "hostC", "hostD", "hostE"};
  const char *hosts[5];
  for (int d = 0; d < n; d++) hosts[d] = names[host[d]];
  gr_all_reduce_options o = {.algorithm = algorithm, .hosts = hosts};
  gr_tensor got[5], want;
  int built = all_reduce_with(n, size, dt, mean, 3, &o, got);
  GR_CHECK_EQ_INT(built, n);
  bool tree = n > 2 && size * (int64_t)gr_dtype_size(dt) < 64 * 1024;
  hier_reference(dt, n, host, size, mean, tree, &want);
  char groups[32];
  int at = 0;
  for (int d = 0; d < n; d++)
    at += snprintf(groups + at, sizeof groups - (size_t)at, "%d", host[d]);
  for (int d = 0; d < n; d++)
    GR_CHECK_MSG(
        gr_tensor_num_bytes(&got[d]) == gr_tensor_num_bytes(&want) &&
            !memcmp(gr_tensor_data(&got[d]), gr_tensor_data(&want), gr_tensor_num_bytes(&want)),
        "hosts %s size=%lld %s%s (%s): member %d differs from the hierarchical order", groups,
        (long long)size, gr_dtype_name(dt), mean ? " mean" : "", algorithm ? algorithm : "auto", d);
  release_all(got, n);
  gr_tensor_release(&want);
}

/* 2-5 members in several groupings (one host, every member its own host,
 * hosts of unequal sizes, members of a host not adjacent in rank), odd
 * sizes (the leaders' tree below 64 KiB, their ring above, with pieces),
 * f32 and f64, sum and mean: every member the same bits, those of the
 * hierarchical order, on every run. */
static void test_hier_same_bits(void) {
  static const int groupings[][5] = {
      {0, 0},       {0, 1},          {0, 0, 1},       {0, 1, 0},       {0, 0, 1, 1},   {0, 1, 1, 1},
      {0, 1, 2, 0}, {0, 0, 0, 1, 1}, {0, 1, 0, 2, 1}, {0, 0, 0, 0, 0}, {0, 1, 2, 3, 4}};
  static const int sizes_n[] = {2, 2, 3, 3, 4, 4, 4, 5, 5, 5, 5};
  const int64_t sizes[] = {0, 1, 7, 1000003};
  for (int gi = 0; gi < 11; gi++)
    for (int k = 0; k < 4; k++) {
      check_hier(sizes_n[gi], groupings[gi], sizes[k], GR_F32, false, "hier");
      check_hier(sizes_n[gi], groupings[gi], sizes[k], GR_F64, gi % 2, "hier");
    }
  setenv("GRAPHRUN_ALL_REDUCE_PIECE", "4000", 1); /* chunks of several pieces among leaders */
  check_hier(5, groupings[8], 3 * 3007 + 2, GR_F32, false, "hier");
  check_hier(4, groupings[4], 2 * 3007 + 1, GR_F64, true, "hier");
  unsetenv("GRAPHRUN_ALL_REDUCE_PIECE");
}

/* Several tensors in one bucket: the flat buffer is their concatenation,
 * and each part of it is read from the inputs by the step that first
 * touches it (sent or added; no copy in first). Each member's results,
 * laid end to end, have the bits of one tensor of the total size reduced
 * in the same order (the ring, the tree, the hierarchical one), with
 * pieces of 1000 elements that straddle the tensors; the fed values are
 * left as they were. */
static void check_several(int n, const int64_t *sizes, int T, gr_dtype dt, bool mean,
                          const char *alg, const int *host) {
  enum { MAXT = 5 };
  static const char *const names[] = {"hostA", "hostB", "hostC", "hostD", "hostE"};
  gr_graph *g = gr_graph_new();
  char devs[5][64];
  const char *dev[5], *hosts[5];
  gr_output x[MAXT * 5], s[MAXT * 5];
  gr_tensor vals[MAXT * 5], kept[MAXT * 5], got[MAXT * 5], want;
  gr_feed feeds[MAXT * 5];
  gr_error e;
  int64_t total = 0, seg[MAXT + 1] = {0};
  for (int t = 0; t < T; t++) seg[t + 1] = total += sizes[t];
  for (int d = 0; d < n; d++) dev[d] = dev_name(d, devs[d]), hosts[d] = names[host ? host[d] : d];
  for (int t = 0; t < T; t++)
    for (int d = 0; d < n; d++) {
      int k = t * n + d;
      gr_graph_push_device_scope(g, dev[d]);
      x[k] = gr_placeholder(g, NULL, dt, (gr_shape){1, {sizes[t]}});
      gr_graph_pop_device_scope(g);
      gr_tensor_alloc(&vals[k], dt, &(gr_shape){1, {sizes[t]}}, &e);
      gr_tensor_alloc(&kept[k], dt, &(gr_shape){1, {sizes[t]}}, &e);
      for (int64_t i = 0; i < sizes[t]; i++)
        gr_tensor_set_f64(&vals[k], i, value_at(d, seg[t] + i));
      memcpy(gr_tensor_data(&kept[k]), gr_tensor_data(&vals[k]), gr_tensor_num_bytes(&vals[k]));
      feeds[k] = (gr_feed){x[k], &vals[k]};
    }
  gr_all_reduce_options o = {.algorithm = alg,
                             .piece_bytes = 1000 * (int64_t)gr_dtype_size(dt),
                             .hosts = host ? hosts : NULL};
  GR_CHECK(gr_all_reduce_with(g, x, T, n, dev, mean ? GR_REDUCE_MEAN : GR_REDUCE_SUM, 1 << 30, &o,
                              s) == GR_OK);
  GR_CHECK_EQ_INT(count_op(g, "collective_all_reduce"), n);
  if (host)
    hier_reference(dt, n, host, total, mean,
                   n > 2 && total * (int64_t)gr_dtype_size(dt) < 64 * 1024,
                   &want); /* the leaders' tree below 64 KiB (check_hier) */
  else
    reference(dt, n, total, mean, !strcmp(alg, "tree"), &want);
  gr_session *ss = gr_session_new(g, &(gr_session_options){.num_devices = n}, &e);
  GR_CHECK_MSG(ss != NULL, "%s", e.msg);
  gr_status st =
      ss ? gr_session_run(ss, feeds, T * n, s, T * n, got, NULL, 0, &e) : GR_ERR_INTERNAL;
  GR_CHECK_MSG(st == GR_OK, "%s", e.msg);
  size_t es = gr_dtype_size(dt);
  for (int t = 0; st == GR_OK && t < T; t++)
    for (int d = 0; d < n; d++) {
      int k = t * n + d;
      GR_CHECK_MSG(!memcmp(gr_tensor_data(&got[k]), (char *)gr_tensor_data(&want) + seg[t] * es,
                           (size_t)sizes[t] * es),
                   "n=%d %s %s%s: tensor %d on member %d differs from the sum in its order", n, alg,
                   gr_dtype_name(dt), mean ? " mean" : "", t, d);
      GR_CHECK_MSG(!memcmp(gr_tensor_data(&vals[k]), gr_tensor_data(&kept[k]),
                           gr_tensor_num_bytes(&kept[k])),
                   "n=%d %s: the fed tensor %d of member %d was written", n, alg, t, d);
      gr_tensor_release(&got[k]);
    }
  for (int k = 0; k < T * n; k++) gr_tensor_release(&vals[k]), gr_tensor_release(&kept[k]);
  gr_tensor_release(&want);
  gr_session_free(ss);
  gr_graph_free(g);
}

static void test_several_inputs(void) {
  const int64_t sizes[] = {1, 2999, 0, 1234, 3001};
  static const int host[] = {0, 1, 0, 2, 1};
  for (int n = 2; n <= 5; n++) {
    check_several(n, sizes, 5, GR_F32, false, "ring", NULL);
    check_several(n, sizes, 5, GR_F64, n % 2, "ring", NULL);
    check_several(n, sizes, 5, GR_F32, n % 2, "tree", NULL);
    check_several(n, sizes + 1, 2, GR_F64, false, "tree", NULL);
  }
  check_several(5, sizes, 5, GR_F32, false, "hier", host);
  check_several(5, sizes, 5, GR_F64, true, "hier", host);
  check_several(3, sizes, 5, GR_F32, false, "hier", host);
  const int64_t large[] = {1, 9999, 0, 4321, 5001}; /* over 64 KiB: the leaders' ring */
  check_several(5, large, 5, GR_F32, false, "hier", host);
  check_several(4, large, 5, GR_F32, true, "hier", host);
}

/* By default the hierarchical all-reduce is taken when the members span
 * more than one host and some host has several (its bits, which differ
 * from the flat ring's here); on one host, or one member per host, the
 * flat ring or tree. */
static void test_hier_chosen(void) {
  static const int two_hosts[] = {0, 0, 1, 1};
  check_hier(4, two_hosts, 1000003, GR_F32, false, NULL);
  check_hier(4, two_hosts, 7, GR_F64, false, NULL);
  gr_tensor flat[4], want;
  all_reduce_local(4, 1000003, GR_F32, false, 1, flat);
  hier_reference(GR_F32, 4, two_hosts, 1000003, false, false, &want);
  GR_CHECK_MSG(memcmp(gr_tensor_data(&flat[0]), gr_tensor_data(&want), gr_tensor_num_bytes(&want)),
               "the flat ring's bits equal the hierarchical ones: the test shows nothing");
  release_all(flat, 4);
  gr_tensor_release(&want);
  static const char *const one[4] = {"a", "a", "a", "a"}, *const own[4] = {"a", "b", "c", "d"};
  for (int c = 0; c < 2; c++) {
    gr_all_reduce_options o = {.hosts = c ? own : one};
    gr_tensor got[4], ring[4];
    all_reduce_with(4, 1000003, GR_F32, false, 1, &o, got);
    all_reduce_local(4, 1000003, GR_F32, false, 1, ring);
    for (int d = 0; d < 4; d++)
      GR_CHECK_MSG(
          !memcmp(gr_tensor_data(&got[d]), gr_tensor_data(&ring[d]), gr_tensor_num_bytes(&ring[d])),
          "%s: member %d is not the flat ring's", c ? "a host each" : "one host", d);
    release_all(got, 4);
    release_all(ring, 4);
  }
}

/* replicas(..., all_reduce=true, algorithm=, bucket=, piece=) keeps its
 * options on the copies, and minimize's collectives take them; without
 * all_reduce=true they are an error naming the place. */
static void test_replicas_options(void) {
  const char *src = "x = placeholder(f32, [4, 3])\n"
                    "device \"/job:worker/task:0\" { w = variable(ones([3, 2])) }\n"
                    "loss = replicas(2, x, all_reduce=true, algorithm=\"hier\", bucket=64, "
                    "piece=12) { reduce_sum(x @ w) }\n"
                    "train = minimize(loss, sgd(0.1))\n";
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error e;
  GR_CHECK_MSG(gr_dsl_load_string("opts.gr", src, g, NULL, &p, &e) == GR_OK, "%s", e.msg);
  int found = 0;
  for (int id = 0; id < gr_graph_num_nodes(g); id++) {
    const gr_node *nd = gr_graph_node(g, id);
    if (strcmp(nd->op->name, "collective_all_reduce") != 0) continue;
    found++;
    GR_CHECK_EQ_INT(gr_node_attr_int(nd, "piece_bytes", -1), 12);
    GR_CHECK_STR_CONTAINS(gr_node_attr_string(nd, "hierarchy", ""), "hosts");
  }
  GR_CHECK_EQ_INT(found, 2);
  const gr_node *copy = gr_graph_find_node(g, "w/replica_1");
  GR_CHECK(copy != NULL);
  if (copy) GR_CHECK_EQ_INT(gr_node_attr_int(copy, "all_reduce_bucket", 0), 64);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  const char *bad[][3] = {
      {"x = placeholder(f32, [4, 3])\nloss = replicas(2, x, piece=12) { reduce_sum(x) }\n",
       "opts.gr:2:", "piece= sets the all-reduce of the gradients: it needs all_reduce=true"},
      {"a = ones([2])\nb = ones([2])\ns, t = all_reduce(a, b, hosts=[\"h\"])\n",
       "opts.gr:3:", "hosts must be a list of 2 host names"}};
  for (int c = 0; c < 2; c++) {
    g = gr_graph_new();
    p = NULL;
    GR_CHECK(gr_dsl_load_string("opts.gr", bad[c][0], g, NULL, &p, &e) != GR_OK);
    GR_CHECK_STR_CONTAINS(e.msg, bad[c][1]);
    GR_CHECK_STR_CONTAINS(e.msg, bad[c][2]);
    gr_dsl_program_free(p); /* the program, with the error's sources */
    gr_graph_free(g);
  }
}

/* The loss sum_d sum(w_d * y_d) over the all-reduce's outputs y_d of x_d
 * (3 devices, f64): its gradient through the collective (itself an
 * all-reduce of the incoming gradients, collective nodes too) against
 * central finite differences, for the sum and the mean, flat and
 * hierarchical; differentiating twice builds a second group, not a clash. */
static double fd_loss(gr_session *ss, gr_feed *feeds, gr_output loss) {
  gr_tensor t;
  gr_error e;
  if (gr_session_run(ss, feeds, 3, &loss, 1, &t, NULL, 0, &e) != GR_OK) {
    GR_CHECK_MSG(false, "%s", e.msg);
    return 0;
  }
  double v = gr_tensor_get_f64(&t, 0);
  gr_tensor_release(&t);
  return v;
}

static void check_gradient(bool mean, const gr_all_reduce_options *o) {
  enum { N = 3, S = 5 };
  gr_graph *g = gr_graph_new();
  char devs[N][64];
  const char *dev[N];
  gr_output x[N], y[N], dx[N], dx2[N], loss = {NULL, 0};
  gr_tensor vals[N];
  gr_feed feeds[N];
  gr_error e;
  for (int d = 0; d < N; d++) {
    dev[d] = dev_name(d, devs[d]);
    gr_graph_push_device_scope(g, dev[d]);
    x[d] = gr_placeholder(g, NULL, GR_F64, (gr_shape){1, {S}});
    gr_graph_pop_device_scope(g);
    gr_tensor_alloc(&vals[d], GR_F64, &(gr_shape){1, {S}}, &e);
    fill(&vals[d], d);
    feeds[d] = (gr_feed){x[d], &vals[d]};
  }
  GR_CHECK(gr_all_reduce_with(g, x, 1, N, dev, mean ? GR_REDUCE_MEAN : GR_REDUCE_SUM, 0, o, y) ==
           GR_OK);
  for (int d = 0; d < N; d++) {
    gr_graph_push_device_scope(g, dev[d]);
    double w[S];
    for (int i = 0; i < S; i++) w[i] = (d + 1) * 0.5 + i * (d % 2 ? -1.25 : 0.75);
    gr_output term = gr_reduce_sum(
        g, gr_mul(g, y[d], gr_const_data(g, GR_F64, gr_shape_make(1, (int64_t[]){S}), w)), NULL, 0,
        false);
    gr_graph_pop_device_scope(g);
    loss = d ? gr_add(g, loss, term) : term;
  }
  int before = count_op(g, "collective_all_reduce");
  GR_CHECK(gr_gradients(g, &loss, 1, x, N, NULL, false, dx) == GR_OK);
  GR_CHECK(gr_gradients(g, &loss, 1, x, N, NULL, false, dx2) == GR_OK);
  GR_CHECK_EQ_INT(count_op(g, "collective_all_reduce"), before + 2 * N);
  gr_session *ss = gr_session_new(g, &(gr_session_options){.num_devices = N}, &e);
  GR_CHECK_MSG(ss != NULL, "%s", e.msg);
  gr_tensor got[2 * N];
  gr_output both[2 * N] = {dx[0], dx[1], dx[2], dx2[0], dx2[1], dx2[2]};
  GR_CHECK_MSG(ss && gr_session_run(ss, feeds, N, both, 2 * N, got, NULL, 0, &e) == GR_OK, "%s",
               e.msg);
  for (int d = 0; ss && d < N; d++) {
    for (int i = 0; i < S; i++) {
      double *v = (double *)gr_tensor_data(&vals[d]) + i, keep = *v, h = 1e-3;
      *v = keep + h;
      double up = fd_loss(ss, feeds, loss);
      *v = keep - h;
      double down = fd_loss(ss, feeds, loss);
      *v = keep;
      double fd = (up - down) / (2 * h), an = gr_tensor_get_f64(&got[d], i);
      GR_CHECK_MSG(fabs(fd - an) <= 1e-6 * (1 + fabs(fd)), "%s%s: dx%d[%d] = %.12g, finite %.12g",
                   mean ? "mean" : "sum", o && o->hosts ? " hier" : "", d, i, an, fd);
      GR_CHECK_MSG(gr_tensor_get_f64(&got[N + d], i) == an, "the second gradient differs");
    }
  }
  for (int d = 0; ss && d < 2 * N; d++) gr_tensor_release(&got[d]);
  gr_session_free(ss);
  for (int d = 0; d < N; d++) gr_tensor_release(&vals[d]);
  gr_graph_free(g);
}

static void test_gradient(void) {
  static const char *const hosts[3] = {"a", "a", "b"};
  gr_all_reduce_options hier = {.algorithm = "hier", .hosts = hosts};
  check_gradient(false, NULL);
  check_gradient(true, NULL);
  check_gradient(false, &hier);
  check_gradient(true, &hier);
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

  setenv("GRAPHRUN_ALL_REDUCE_PIECE", "lots", 1); /* read when the graph is built */
  GR_CHECK(gr_all_reduce(g, x, 2, dev, GR_REDUCE_SUM, s) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "GRAPHRUN_ALL_REDUCE_PIECE='lots'");
  unsetenv("GRAPHRUN_ALL_REDUCE_PIECE");
  gr_graph_clear_error(g);
  setenv("GRAPHRUN_ALL_REDUCE_PIECE", "0", 1);
  GR_CHECK(gr_all_reduce(g, x, 2, dev, GR_REDUCE_SUM, s) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "GRAPHRUN_ALL_REDUCE_PIECE='0': want a number");
  unsetenv("GRAPHRUN_ALL_REDUCE_PIECE");
  gr_graph_clear_error(g);
  gr_all_reduce_options bad = {.algorithm = "bush"};
  GR_CHECK(gr_all_reduce_with(g, x, 1, 2, dev, GR_REDUCE_SUM, 0, &bad, s) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "all_reduce: algorithm 'bush'");
  gr_graph_clear_error(g);
  bad = (gr_all_reduce_options){.piece_bytes = -1};
  GR_CHECK(gr_all_reduce_with(g, x, 1, 2, dev, GR_REDUCE_SUM, 0, &bad, s) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "piece -1 bytes");
  gr_graph_clear_error(g);
  bad = (gr_all_reduce_options){.hosts = (const char *[]){"a", "b,c"}};
  GR_CHECK(gr_all_reduce_with(g, x, 1, 2, dev, GR_REDUCE_SUM, 0, &bad, s) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "host 1 is 'b,c'");
  gr_graph_clear_error(g);

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

/* SGD fused into the all-reduce of mirrored variables' gradients
 * (collective_all_reduce_sgd: each part updated as soon as it holds its
 * total) gives the same bits as the unfused update (GRAPHRUN_FUSE_UPDATE=0:
 * apply_sgd after the whole all-reduce), on every copy: 2-4 replicas, ring,
 * tree and hierarchical, pieces of 5 elements and the default, f32 and
 * f64, three steps. Returns every variable's values after them, in node
 * order, concatenated as f64 (*count of them), and how many fused nodes
 * the graph has. */
static double *train_mirrored(int n, const char *dtype, bool fuse, int *count, int *fused) {
  static const char *const names[4] = {
      "/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0",
      "/job:worker/replica:0/task:2/device:CPU:0", "/job:worker/replica:0/task:3/device:CPU:0"};
  char src[1024];
  snprintf(src, sizeof src,
           "x = cast(glorot_uniform([12, 7], seed=5), %s)\n"
           "y = cast(glorot_uniform([12, 3], seed=6), %s)\n"
           "device \"/job:worker/task:0\" {\n"
           "  w1 = variable(cast(glorot_uniform([7, 5], seed=1), %s))\n"
           "  b1 = variable(cast(zeros([5]), %s))\n"
           "  w2 = variable(cast(glorot_uniform([5, 3], seed=2), %s))\n"
           "}\n"
           "loss = replicas(%d, x, y, all_reduce=true) {\n"
           "  reduce_mean(square(tanh(x @ w1 + b1) @ w2 - y))\n"
           "}\n"
           "train = minimize(loss, sgd(0.3))\n",
           dtype, dtype, dtype, dtype, dtype, n);
  if (!fuse) setenv("GRAPHRUN_FUSE_UPDATE", "0", 1);
  gr_graph *g = gr_graph_new();
  gr_dsl_program *p = NULL;
  gr_error e;
  GR_CHECK_MSG(gr_dsl_load_string("fused.gr", src, g, NULL, &p, &e) == GR_OK, "%s", e.msg);
  unsetenv("GRAPHRUN_FUSE_UPDATE");
  *fused = count_op(g, "collective_all_reduce_sgd");
  gr_output train, vars[16];
  int nv = 0;
  GR_CHECK(gr_dsl_lookup(p, "train", &train));
  for (int id = 0; id < gr_graph_num_nodes(g) && nv < 16; id++)
    if (!strcmp(gr_graph_node(g, id)->op->name, "variable"))
      vars[nv++] = (gr_output){gr_graph_node(g, id), 0};
  gr_session *ss = gr_session_new(
      g, &(gr_session_options){.num_devices = n, .device_names = names, .inter_op_threads = 2}, &e);
  GR_CHECK_MSG(ss != NULL, "%s", ss ? "" : e.msg);
  double *out = NULL;
  *count = 0;
  gr_step_trace *trace = gr_step_trace_new();
  for (int step = 0; ss && trace && step < 3; step++) {
    gr_step_trace_clear(trace);
    GR_CHECK_MSG(gr_session_run_traced(ss, NULL, 0, NULL, 0, NULL, &train, 1, trace, &e) == GR_OK,
                 "%s", e.msg);
    int plain = 0, fused_run = 0; /* the unfused all-reduce left in the graph is pruned */
    for (int i = 0; i < gr_step_trace_count(trace); i++) {
      const char *op = gr_step_trace_event(trace, i)->node->op->name;
      plain += !strcmp(op, "collective_all_reduce");
      fused_run += !strcmp(op, "collective_all_reduce_sgd");
    }
    GR_CHECK_MSG(plain == (fuse ? 0 : n) && fused_run == (fuse ? n : 0),
                 "%d replicas: %d plain and %d fused all-reduces ran", n, plain, fused_run);
  }
  gr_step_trace_free(trace);
  gr_tensor t[16];
  if (ss && gr_session_run(ss, NULL, 0, vars, nv, t, NULL, 0, &e) == GR_OK) {
    int total = 0;
    for (int k = 0; k < nv; k++) total += (int)gr_tensor_num_elements(&t[k]);
    out = malloc(sizeof *out * (size_t)total);
    for (int k = 0; k < nv; k++) {
      for (int64_t i = 0; out && i < gr_tensor_num_elements(&t[k]); i++)
        out[(*count)++] = gr_tensor_get_f64(&t[k], i);
      gr_tensor_release(&t[k]);
    }
  }
  gr_session_free(ss);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  return out;
}

/* The fused op refuses what it cannot update: integer values, and attr
 * apply_vars naming another count of variables than inputs. */
static void test_fused_sgd_errors(void) {
  static const struct {
    gr_dtype dt;
    const char *vars, *want;
  } cases[] = {{GR_I32, "a,b", "dtype"},
               {GR_F32, "a,b,c", "apply_vars names 3 variables for 2 inputs"},
               {GR_F32, "a", "apply_vars names 1 variables for 2 inputs"}};
  for (int c = 0; c < 3; c++) {
    gr_graph *g = gr_graph_new();
    gr_output x[2] = {gr_zeros(g, cases[c].dt, (gr_shape){1, {3}}),
                      gr_zeros(g, cases[c].dt, (gr_shape){1, {2}})};
    gr_attr a[] = {gr_attr_string("group_key", "k"), gr_attr_int("group_size", 1),
                   gr_attr_int("rank", 0), gr_attr_string("apply_vars", cases[c].vars)};
    GR_CHECK(gr_op(g, "collective_all_reduce_sgd", NULL, x, 2, a, 4).node == NULL);
    GR_CHECK_STR_CONTAINS(gr_graph_error(g) ? gr_graph_error(g)->msg : "", cases[c].want);
    gr_graph_free(g);
  }
  /* one name per input, an empty one for an input that updates none */
  gr_graph *g = gr_graph_new();
  gr_output x[2] = {gr_zeros(g, GR_F32, (gr_shape){1, {3}}),
                    gr_zeros(g, GR_F32, (gr_shape){1, {2}})};
  gr_attr a[] = {gr_attr_string("group_key", "k"), gr_attr_int("group_size", 1),
                 gr_attr_int("rank", 0), gr_attr_string("apply_vars", "a,")};
  GR_CHECK(gr_op(g, "collective_all_reduce_sgd", NULL, x, 2, a, 4).node != NULL);
  gr_graph_free(g);
}

static void test_fused_sgd(void) {
  static const char *const algs[] = {"ring", "tree", "hier"};
  for (int n = 2; n <= 4; n++)
    for (int a = 0; a < 3; a++)
      for (int piece = 0; piece < 2; piece++)
        for (int f64 = 0; f64 < 2; f64++) {
          setenv("GRAPHRUN_ALL_REDUCE", algs[a], 1);
          if (piece) setenv("GRAPHRUN_ALL_REDUCE_PIECE", f64 ? "40" : "20", 1);
          int c1, c2, k1, k2;
          double *fused = train_mirrored(n, f64 ? "f64" : "f32", true, &c1, &k1),
                 *plain = train_mirrored(n, f64 ? "f64" : "f32", false, &c2, &k2);
          unsetenv("GRAPHRUN_ALL_REDUCE"), unsetenv("GRAPHRUN_ALL_REDUCE_PIECE");
          GR_CHECK_MSG(k1 == n && k2 == 0, "%d replicas, %s: %d fused nodes (unfused: %d)", n,
                       algs[a], k1, k2);
          GR_CHECK(fused && plain && c1 == c2 && c1 == (7 * 5 + 5 + 5 * 3) * n);
          GR_CHECK_MSG(fused && plain && !memcmp(fused, plain, sizeof *fused * (size_t)c1),
                       "%d replicas, %s, pieces %d, f%d: fused and unfused differ", n, algs[a],
                       piece, f64 ? 64 : 32);
          free(fused), free(plain);
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
  GR_RUN(test_options_in_graph);
  GR_RUN(test_hier_same_bits);
  GR_RUN(test_hier_chosen);
  GR_RUN(test_several_inputs);
  GR_RUN(test_replicas_options);
  GR_RUN(test_gradient);
  GR_RUN(test_fused_sgd);
  GR_RUN(test_fused_sgd_errors);
  return gr_test_finish();
}
