/* Loops and branches across devices: a while loop whose body spans 3
 * devices, a nested loop crossing devices, a cond whose branches live on
 * two other devices, a long loop with a small iteration window. Each gives
 * the single-device values bit for bit, and the number of transfers per
 * iteration (static: the pairs the partitioner made; dynamic: the sends of a
 * step) is what the design predicts: per iteration of a loop spanning k
 * devices, k - 1 predicate pairs plus one pair per (tensor, device) crossing
 * inside it; a loop invariant crosses once per step. */
#include <graphrun.h>
#include <stdio.h>
#include <string.h>

#include "core/partition.h"
#include "gr_test.h"
#include "test_util.h"

/* Partitions every node of g, each on the device its pin names (CPU:0 if none). */
static gr_partitions *partition_pinned(gr_graph *g, const gr_output *fetches, int nx) {
  int n = gr_graph_num_nodes(g);
  gr_node *nodes[512];
  GR_CHECK(n <= 512);
  for (int i = 0; i < n; i++) {
    nodes[i] = gr_graph_node(g, i);
    const char *r = nodes[i]->requested_device;
    nodes[i]->assigned_device = gt_device_name(r[0] ? r[strlen(r) - 1] - '0' : 0);
  }
  gr_partitions *ps = NULL;
  gr_error err;
  GR_CHECK_OK(gr_partition_graph(nodes, n, NULL, 0, fetches, nx, NULL, &ps, &err), err);
  for (int i = 0; i < n; i++) nodes[i]->assigned_device = NULL;
  return ps;
}

/* Runs fetches on `devices` devices; checks them against want (if given),
 * else stores them there. Returns the step's number of sends. */
static int64_t run_check(gr_graph *g, int devices, int threads, const gr_output *fetches, int nx,
                         gr_tensor *want, bool store) {
  gr_session *s = gt_session(g, devices, threads);
  gr_tensor got[4];
  gr_error err;
  GR_CHECK_OK(gr_session_run(s, NULL, 0, fetches, nx, got, NULL, 0, &err), err);
  for (int i = 0; i < nx; i++) {
    if (store) {
      want[i] = got[i];
    } else {
      GR_CHECK_MSG(gt_equal(&got[i], &want[i]), "fetch %d on %d devices differs", i, devices);
      gr_tensor_release(&got[i]);
    }
  }
  int64_t sends = gr_session_last_transfers(s).sends;
  gr_session_free(s);
  return sends;
}

/* ---- a loop whose body spans 3 devices ------------------------------------- */

/* The argument of a loop of counter v[0] up to limit, with weights w. */
typedef struct loop_arg {
  gr_output limit, w;
  bool pinned;
} loop_arg;

static gr_output below_limit(gr_graph *g, void *p, const gr_output *v) {
  return gr_less(g, v[0], ((loop_arg *)p)->limit);
}
/* i + 1 and x * tanh(x W) with the matmul on device 1, the tanh on device 2,
 * the rest (and the predicate) on device 0. */
static void span_body(gr_graph *g, void *p, const gr_output *v, gr_output *next) {
  loop_arg *a = p;
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  if (a->pinned) gt_pin(g, 1);
  gr_output m = gr_matmul(g, v[1], a->w, false, false);
  if (a->pinned) gr_graph_pop_device_scope(g), gt_pin(g, 2);
  gr_output t = gr_tanh(g, m);
  if (a->pinned) gr_graph_pop_device_scope(g);
  next[1] = gr_mul(g, t, v[1]);
}

static gr_graph *span_graph(int iters, bool pinned, gr_output *out) {
  gr_graph *g = gr_graph_new();
  if (pinned) gt_pin(g, 0);
  gr_tensor wv = gt_random(&(gt_rng){5}, GR_F32, (gr_shape){2, {4, 4}}, -1, 1);
  gr_tensor xv = gt_random(&(gt_rng){6}, GR_F32, (gr_shape){2, {3, 4}}, -1, 1);
  loop_arg a = {gr_const_i64(g, iters), gr_variable(g, "w", gr_const(g, &wv)), pinned};
  gr_output v[2] = {gr_const_i64(g, 0), gr_const(g, &xv)};
  GR_CHECK(gr_while_loop(g, below_limit, span_body, &a, 2, v, 0) == GR_OK);
  if (pinned) gr_graph_pop_device_scope(g);
  gr_tensor_release(&wv);
  gr_tensor_release(&xv);
  out[0] = v[0];
  out[1] = v[1];
  return g;
}

static void test_loop_body_on_three_devices(void) {
  gr_output f[2];
  gr_graph *g = span_graph(3, true, f);
  gr_partitions *ps = partition_pinned(g, f, 2);
  GR_CHECK_EQ_INT(ps->num_parts, 3);
  GR_CHECK_EQ_INT(ps->num_control_loops, 3); /* one per device the loop spans */
  /* per iteration: the predicate to devices 1 and 2; x to 1, x W to 2, tanh back to 0 */
  GR_CHECK_EQ_INT(ps->num_loop_sends, 2 + 3);
  GR_CHECK_EQ_INT(ps->num_sends - ps->num_loop_sends, 1); /* w, once per step */
  GR_CHECK_EQ_INT(ps->num_control_sends, 0);
  gr_partitions_free(ps);
  gr_graph_free(g);
  /* a trace of the step: the matmul ran on device 1 once per live iteration */
  g = span_graph(4, true, f);
  gr_session *s = gt_session(g, 3, 2);
  gr_step_trace *tr = gr_step_trace_new();
  gr_tensor got[2];
  gr_error err;
  GR_CHECK_OK(gr_session_run_traced(s, NULL, 0, f, 2, got, NULL, 0, tr, &err), err);
  int runs = 0;
  int64_t iter_sum = 0;
  for (int i = 0; i < gr_step_trace_count(tr); i++) {
    const gr_trace_event *e = gr_step_trace_event(tr, i);
    if (strcmp(e->node->name, "while/matmul") != 0) continue;
    GR_CHECK_STR_CONTAINS(e->node->assigned_device, "CPU:1");
    GR_CHECK_EQ_INT(e->out_bytes, 3 * 4 * (int64_t)sizeof(float));
    GR_CHECK(e->end_ns >= e->start_ns);
    runs++;
    iter_sum += e->iteration;
  }
  GR_CHECK_EQ_INT(runs, 4);
  GR_CHECK_EQ_INT(iter_sum, 0 + 1 + 2 + 3);
  gr_tensor_release(&got[0]);
  gr_tensor_release(&got[1]);
  gr_step_trace_free(tr);
  gr_session_free(s);
  gr_graph_free(g);
  for (int iters = 0; iters <= 7; iters += iters < 2 ? 1 : 5) {
    gr_tensor want[2];
    g = span_graph(iters, false, f);
    run_check(g, 1, 1, f, 2, want, true);
    gr_graph_free(g);
    g = span_graph(iters, true, f);
    for (int threads = 1; threads <= 2; threads++) {
      int64_t sends = run_check(g, 3, threads, f, 2, want, false);
      /* the frame runs iters + 1 times (the last one finds the predicate false) */
      GR_CHECK_MSG(sends == 5 * (iters + 1) + 1, "%d iterations: %lld sends", iters,
                   (long long)sends);
    }
    gr_graph_free(g);
    gr_tensor_release(&want[0]);
    gr_tensor_release(&want[1]);
  }
}

/* ---- a nested loop crossing devices ------------------------------------------ */

typedef struct nest_arg {
  gr_output w;
  bool pinned;
} nest_arg;

/* y = 0.5 * tanh(y W): the matmul and tanh on device 1, the scaling on 2 */
static void inner_body(gr_graph *g, void *p, const gr_output *v, gr_output *next) {
  loop_arg *a = p;
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  if (a->pinned) gt_pin(g, 1);
  gr_output t = gr_tanh(g, gr_matmul(g, v[1], a->w, false, false));
  if (a->pinned) gr_graph_pop_device_scope(g), gt_pin(g, 2);
  next[1] = gr_mul(g, t, gr_const_f32(g, 0.5f));
  if (a->pinned) gr_graph_pop_device_scope(g);
}
static gr_output outer_cond(gr_graph *g, void *p, const gr_output *v) {
  (void)p;
  return gr_less(g, v[0], gr_const_i64(g, 3));
}
/* outer iteration i runs the inner loop i + 1 times on x + 1 */
static void outer_body(gr_graph *g, void *p, const gr_output *v, gr_output *next) {
  nest_arg *a = p;
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  loop_arg ia = {next[0], a->w, a->pinned};
  gr_output iv[2] = {gr_const_i64(g, 0), gr_add(g, v[1], gr_const_f32(g, 1))};
  GR_CHECK(gr_while_loop(g, below_limit, inner_body, &ia, 2, iv, 0) == GR_OK);
  next[1] = iv[1];
}

static gr_graph *nest_graph(bool pinned, gr_output *out) {
  gr_graph *g = gr_graph_new();
  if (pinned) gt_pin(g, 0);
  gr_tensor wv = gt_random(&(gt_rng){8}, GR_F32, (gr_shape){2, {4, 4}}, -1, 1);
  gr_tensor xv = gt_random(&(gt_rng){9}, GR_F32, (gr_shape){2, {2, 4}}, -1, 1);
  nest_arg a = {gr_variable(g, "w", gr_const(g, &wv)), pinned};
  gr_output v[2] = {gr_const_i64(g, 0), gr_const(g, &xv)};
  GR_CHECK(gr_while_loop(g, outer_cond, outer_body, &a, 2, v, 0) == GR_OK);
  if (pinned) gr_graph_pop_device_scope(g);
  gr_tensor_release(&wv);
  gr_tensor_release(&xv);
  out[0] = v[1];
  return g;
}

static void test_nested_loop_across_devices(void) {
  gr_output f[1];
  gr_graph *g = nest_graph(true, f);
  gr_partitions *ps = partition_pinned(g, f, 1);
  GR_CHECK_EQ_INT(ps->num_parts, 3);
  GR_CHECK_EQ_INT(ps->num_control_loops, 6); /* both frames span all 3 devices */
  /* outer: its predicate to 1 and 2; inner: its predicate to 1 and 2, y to 1,
   * tanh(y W) to 2, the result back to 0 */
  GR_CHECK_EQ_INT(ps->num_loop_sends, 2 + 5);
  GR_CHECK_EQ_INT(ps->num_sends - ps->num_loop_sends, 1); /* w */
  gr_partitions_free(ps);
  gr_graph_free(g);
  gr_tensor want[1];
  g = nest_graph(false, f);
  run_check(g, 1, 1, f, 1, want, true);
  gr_graph_free(g);
  g = nest_graph(true, f);
  for (int threads = 1; threads <= 2; threads++) {
    int64_t sends = run_check(g, 3, threads, f, 1, want, false);
    /* 4 outer iterations (i = 0..3); in live iteration i the inner loop runs
     * i + 2 times, in the last (dead) one once */
    int64_t predicted = 1 + 2 * 4;
    for (int i = 0; i < 3; i++) predicted += 5 * (i + 2);
    predicted += 5;
    GR_CHECK_MSG(sends == predicted, "%lld sends, predicted %lld", (long long)sends,
                 (long long)predicted);
  }
  gr_graph_free(g);
  gr_tensor_release(&want[0]);
}

/* ---- a cond whose branches live on two other devices ------------------------ */

typedef struct br_arg {
  gr_output a, b;
  bool pinned;
} br_arg;
static void br_then(gr_graph *g, void *p, gr_output *outs) {
  br_arg *a = p;
  if (a->pinned) gt_pin(g, 1);
  outs[0] = gr_mul(g, gr_tanh(g, a->a), a->b);
  if (a->pinned) gr_graph_pop_device_scope(g);
}
static void br_else(gr_graph *g, void *p, gr_output *outs) {
  br_arg *a = p;
  if (a->pinned) gt_pin(g, 2);
  outs[0] = gr_sub(g, a->a, gr_relu(g, a->b));
  if (a->pinned) gr_graph_pop_device_scope(g);
}

static void test_cond_branches_on_other_devices(void) {
  for (int pinned = 0; pinned < 2; pinned++) {
    gr_graph *g = gr_graph_new();
    if (pinned) gt_pin(g, 0);
    gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){1, {4}});
    br_arg a = {gr_neg(g, x), gr_mul(g, x, x), pinned};
    gr_output pred = gr_greater(g, gr_reduce_sum(g, x, NULL, 0, false), gr_const_f32(g, 0)), y;
    GR_CHECK(gr_cond(g, pred, br_then, br_else, &a, 1, &y) == GR_OK);
    if (pinned) gr_graph_pop_device_scope(g);
    gr_session *s = gt_session(g, pinned ? 3 : 1, 2);
    for (int side = 0; side < 2; side++) {
      double xs[4] = {side ? 1 : -1, 0.5, -0.25, side ? 2 : -2};
      gr_tensor xv = gt_make(GR_F32, (gr_shape){1, {4}}, xs), out;
      gr_feed feed = {x, &xv};
      gr_error err;
      GR_CHECK_OK(gr_session_run(s, &feed, 1, &y, 1, &out, NULL, 0, &err), err);
      for (int i = 0; i < 4; i++) {
        float av = -(float)xs[i], bv = (float)xs[i] * (float)xs[i];
        float want = side ? tanhf(av) * bv : av - (bv > 0 ? bv : 0);
        GR_CHECK(gr_tensor_get_f64(&out, i) == (double)want);
      }
      gr_transfer_stats moved = gr_session_last_transfers(s);
      if (pinned) {
        /* a and b into each branch, each branch's result back: 6 sends, the
         * untaken branch's 3 dead (no bytes) */
        GR_CHECK_EQ_INT(moved.sends, 6);
        GR_CHECK_EQ_INT(moved.bytes, 3 * 4 * (int64_t)sizeof(float));
      } else {
        GR_CHECK_EQ_INT(moved.sends, 0);
      }
      gr_tensor_release(&out);
      gr_tensor_release(&xv);
    }
    gr_session_free(s);
    gr_graph_free(g);
  }
}

/* ---- a long loop, a small window, two devices ------------------------------- */

/* each of the three values moves to the other device and back every iteration */
static void ping_body(gr_graph *g, void *p, const gr_output *v, gr_output *next) {
  loop_arg *a = p;
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  if (a->pinned) gt_pin(g, 1);
  gr_output u = gr_add(g, gr_mul(g, v[1], gr_const_f32(g, 0.999f)), v[2]);
  if (a->pinned) gr_graph_pop_device_scope(g);
  next[1] = gr_sub(g, u, gr_const_f32(g, 0.001f));
  next[2] = gr_tanh(g, u);
}

static void test_long_loop_small_window(void) {
  gr_tensor want;
  for (int devs = 1; devs <= 2; devs++)
    for (int par = 1; par <= 10; par += 9) {
      gr_graph *g = gr_graph_new();
      if (devs > 1) gt_pin(g, 0);
      loop_arg a = {.limit = gr_const_i64(g, 2000), .pinned = devs > 1};
      gr_output v[3] = {gr_const_i64(g, 0), gr_const_f32(g, 0.5f), gr_const_f32(g, -0.25f)};
      GR_CHECK(gr_while_loop(g, below_limit, ping_body, &a, 3, v, par) == GR_OK);
      if (devs > 1) gr_graph_pop_device_scope(g);
      int64_t sends = run_check(g, devs, 2, &v[1], 1, &want, devs == 1 && par == 1);
      /* the predicate, v1 and v2 to device 1 and u back */
      if (devs > 1) GR_CHECK_EQ_INT(sends, 4 * 2001);
      gr_graph_free(g);
    }
  gr_tensor_release(&want);
}

/* ---- a cond inside a loop body, its merge on another device --------------- */

typedef struct cl_arg {
  bool pinned;
} cl_arg;
static gr_output cl_cond(gr_graph *g, void *p, const gr_output *v) {
  (void)p;
  return gr_less(g, v[0], gr_const_i64(g, 6));
}
static void cl_then(gr_graph *g, void *p, gr_output *outs) {
  outs[0] = gr_mul(g, *(gr_output *)p, gr_const_f32(g, 2));
}
static void cl_else(gr_graph *g, void *p, gr_output *outs) {
  outs[0] = gr_neg(g, *(gr_output *)p);
}
/* s = i > 2 ? 2 s : -s, the cond's merge (and the branches) on device 1 */
static void cl_body(gr_graph *g, void *p, const gr_output *v, gr_output *next) {
  cl_arg *a = p;
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  gr_output pred = gr_greater(g, v[0], gr_const_i64(g, 2)), s = v[1];
  if (a->pinned) gt_pin(g, 1);
  GR_CHECK(gr_cond(g, pred, cl_then, cl_else, &s, 1, &next[1]) == GR_OK);
  if (a->pinned) gr_graph_pop_device_scope(g);
}

static void test_cond_in_loop_across_devices(void) {
  gr_tensor want;
  for (int pinned = 0; pinned < 2; pinned++) {
    gr_graph *g = gr_graph_new();
    cl_arg a = {pinned};
    gr_output v[2] = {gr_const_i64(g, 0), gr_const_f32(g, 1.25f)};
    GR_CHECK(gr_while_loop(g, cl_cond, cl_body, &a, 2, v, 0) == GR_OK);
    run_check(g, pinned ? 2 : 1, 2, &v[1], 1, &want, !pinned);
    if (!pinned) GR_CHECK(gr_tensor_get_f64(&want, 0) == -1.25 * 8); /* -,-,-,*2,*2,*2 */
    gr_graph_free(g);
  }
  gr_tensor_release(&want);
}

/* A value used outside its loop without an exit is an error naming both
 * nodes, not an abort, also when the user is on another device. */
static gr_output leaked;
static gr_output leak_cond(gr_graph *g, void *p, const gr_output *v) {
  (void)p;
  return gr_less(g, v[0], gr_const_i64(g, 3));
}
static void leak_body(gr_graph *g, void *p, const gr_output *v, gr_output *next) {
  (void)p;
  next[0] = leaked = gr_add(g, v[0], gr_const_i64(g, 1));
}

static void test_value_leaving_a_loop_without_exit(void) {
  for (int devices = 1; devices <= 2; devices++) {
    gr_graph *g = gr_graph_new();
    gr_output v[1] = {gr_const_i64(g, 0)};
    GR_CHECK(gr_while_loop(g, leak_cond, leak_body, NULL, 1, v, 0) == GR_OK);
    gt_pin(g, devices - 1);
    gr_output x = gr_add(g, v[0], leaked);
    gr_graph_pop_device_scope(g);
    gr_session *s = gt_session(g, devices, 2);
    gr_tensor out;
    gr_error err;
    GR_CHECK(gr_session_run(s, NULL, 0, &x, 1, &out, NULL, 0, &err) == GR_ERR_INVALID_ARGUMENT);
    GR_CHECK_STR_CONTAINS(err.msg, "'add'");
    GR_CHECK_STR_CONTAINS(err.msg, "'while/add'");
    gr_session_free(s);
    gr_graph_free(g);
  }
}

int main(void) {
  GR_RUN(test_loop_body_on_three_devices);
  GR_RUN(test_nested_loop_across_devices);
  GR_RUN(test_cond_branches_on_other_devices);
  GR_RUN(test_long_loop_small_window);
  GR_RUN(test_cond_in_loop_across_devices);
  GR_RUN(test_value_leaving_a_loop_without_exit);
  return gr_test_finish();
}
