/* Partitioning and multi-device steps: one _send/_recv pair per (tensor,
 * destination device), control edges across devices, constants copied
 * instead of sent, a node's control inputs from one device crossing as one
 * transfer, feeds and fetches on any device, deadness of a cond's
 * untaken branch crossing devices, a step's target group waiting only on
 * its own device, an error on one device aborting every
 * device's step, recv scheduling, and a property test: random DAGs (with a
 * cond and a while loop whose ops, nested loop and cond are spread too) over
 * 2-4 devices, pinned or placed by the cost-model placer, with and without
 * recv scheduling, give the single-device results bit for bit. */
#include <graphrun.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/partition.h"
#include "placer/gr_placer.h"
#include "gr_test.h"
#include "random_graph.h"
#include "test_util.h"

/* Partitions every node of g (devices from assigned_device) for fetches. */
static gr_partitions *partition_all(gr_graph *g, const gr_output *feeds, int nf,
                                    const gr_output *fetches, int nx) {
  int n = gr_graph_num_nodes(g);
  gr_node *nodes[256];
  GR_CHECK(n <= 256);
  for (int i = 0; i < n; i++) nodes[i] = gr_graph_node(g, i);
  gr_partitions *ps = NULL;
  gr_error err;
  GR_CHECK_OK(gr_partition_graph(nodes, n, feeds, nf, fetches, nx, NULL, &ps, &err), err);
  return ps;
}

/* Every node of g (each pinned with gt_pin) assigned to its pinned device. */
static void assign_pinned(gr_graph *g) {
  GR_CHECK(gr_graph_error(g) == NULL);
  for (int i = 0; i < gr_graph_num_nodes(g); i++) {
    gr_node *n = gr_graph_node(g, i);
    n->assigned_device = gt_device_name(n->requested_device[strlen(n->requested_device) - 1] - '0');
  }
}

static int count_op(const gr_partition *p, const char *op) {
  int c = 0;
  for (int i = 0; i < gr_graph_num_nodes(p->graph); i++)
    if (strcmp(gr_graph_node(p->graph, i)->op->name, op) == 0) c++;
  return c;
}

/* a on device 0 feeds three consumers on device 1 and one on device 2: two
 * pairs, not four; a control edge crosses as its own pair; the constant and
 * the fill (ones) used on other devices are copied, not sent. */
static void test_one_pair_per_tensor_and_device(void) {
  gr_graph *g = gr_graph_new();
  gt_pin(g, 0);
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){1, {3}});
  gr_output c = gr_const_f32(g, 2), ones = gr_ones(g, GR_F32, (gr_shape){1, {3}});
  gr_output a = gr_mul(g, gr_mul(g, x, c), ones);
  gr_graph_pop_device_scope(g);
  gt_pin(g, 1);
  gr_output b1 = gr_add(g, a, c), b2 = gr_mul(g, a, a), b3 = gr_sub(g, a, gr_mul(g, b1, ones));
  gr_output y = gr_add_n(g, (gr_output[]){b1, b2, b3}, 3);
  gr_graph_pop_device_scope(g);
  gt_pin(g, 2);
  gr_graph_push_control_deps(g, &b2, 1);
  gr_output z = gr_neg(g, a);
  gr_graph_pop_control_deps(g);
  gr_graph_pop_device_scope(g);
  assign_pinned(g);
  gr_output feeds[] = {x}, fetches[] = {y, z};
  gr_partitions *ps = partition_all(g, feeds, 1, fetches, 2);
  GR_CHECK_EQ_INT(ps->num_parts, 3);
  GR_CHECK_EQ_INT(ps->num_sends, 3); /* a -> 1, a -> 2, control b2 -> 2 */
  GR_CHECK_EQ_INT(ps->num_control_sends, 1);
  GR_CHECK_EQ_INT(ps->num_dup_consts, 2);
  GR_CHECK_EQ_INT(count_op(&ps->parts[1], "fill"), 1);
  GR_CHECK_EQ_INT(count_op(&ps->parts[0], "_send"), 2);
  GR_CHECK_EQ_INT(count_op(&ps->parts[1], "_recv"), 1);
  GR_CHECK_EQ_INT(count_op(&ps->parts[1], "_send"), 1);
  GR_CHECK_EQ_INT(count_op(&ps->parts[2], "_recv"), 2);
  GR_CHECK_EQ_INT(ps->parts[0].num_feeds, 1);
  GR_CHECK_EQ_INT(ps->parts[1].num_fetches + ps->parts[2].num_fetches, 2);
  for (int k = 0; k < 3; k++) GR_CHECK(gr_graph_error(ps->parts[k].graph) == NULL);
  gr_partitions_free(ps);

  /* the same step run on 3 devices gives the 1-device values */
  gr_session *s = gt_session(g, 3, 2);
  gr_tensor xv = gt_make(GR_F32, (gr_shape){1, {3}}, (double[]){1, -2, 0.5}), out[2];
  gr_feed f = {x, &xv};
  gr_error err;
  for (int rep = 0; rep < 3; rep++) {
    GR_CHECK_OK(gr_session_run(s, &f, 1, fetches, 2, out, NULL, 0, &err), err);
    for (int i = 0; i < 3; i++) {
      double av = 2 * gr_tensor_get_f64(&xv, i), b1v = av + 2;
      GR_CHECK(gr_tensor_get_f64(&out[0], i) == (float)(b1v + av * av + (av - b1v)));
      GR_CHECK(gr_tensor_get_f64(&out[1], i) == -av);
    }
    gr_tensor_release(&out[0]);
    gr_tensor_release(&out[1]);
  }
  gr_tensor_release(&xv);
  gr_session_free(s);
  gr_graph_free(g);
}

/* A step's target group (minimize's train) on device 0 over updates on
 * devices 0 and 1: no control transfer for it (the step ends when both
 * devices have), yet device 1's update runs every step; with a node that
 * waits for the group, the control edge crosses again. */
static void test_target_group_waits_on_its_device(void) {
  gr_graph *g = gr_graph_new();
  gr_output v[2], u[2];
  for (int k = 0; k < 2; k++) {
    gt_pin(g, k);
    char name[8];
    snprintf(name, sizeof name, "v%d", k);
    v[k] = gr_variable(g, name, gr_const_f32(g, (float)(k + 1)));
    u[k] = gr_assign_add(g, v[k], gr_const_f32(g, 1));
    gr_graph_pop_device_scope(g);
  }
  gt_pin(g, 0);
  gr_output train = gr_group(g, "train", u, 2);
  gr_graph_pop_device_scope(g);
  assign_pinned(g);
  gr_partitions *ps = partition_all(g, NULL, 0, NULL, 0);
  GR_CHECK_EQ_INT(ps->num_control_sends, 0);
  GR_CHECK_EQ_INT(count_op(&ps->parts[1], "assign_add"), 1);
  gr_partitions_free(ps);
  gr_session *s = gt_session(g, 2, 2);
  gr_error err;
  for (int step = 0; s && step < 3; step++)
    GR_CHECK_OK(gr_session_run(s, NULL, 0, NULL, 0, NULL, &train, 1, &err), err);
  gr_tensor out[2];
  if (s) GR_CHECK_OK(gr_session_run(s, NULL, 0, v, 2, out, NULL, 0, &err), err);
  GR_CHECK(s && gr_tensor_get_f64(&out[0], 0) == 4 && gr_tensor_get_f64(&out[1], 0) == 5);
  if (s) gr_tensor_release(&out[0]), gr_tensor_release(&out[1]);
  gr_session_free(s);
  /* a read that waits for the group: the group waits for device 1 again */
  gt_pin(g, 0);
  gr_graph_push_control_deps(g, &train, 1);
  gr_output after = gr_neg(g, v[0]);
  gr_graph_pop_control_deps(g);
  gr_graph_pop_device_scope(g);
  gr_node *an = after.node;
  an->assigned_device = gt_device_name(0);
  ps = partition_all(g, NULL, 0, &after, 1);
  GR_CHECK_EQ_INT(ps->num_control_sends, 1);
  gr_partitions_free(ps);
  gr_graph_free(g);
}

/* A node's control inputs from one other device cross as one transfer
 * (sent when all of them have run), not one each: minimize's global step
 * waits for every update. Three updates on device 1 and one on device 2
 * before two nodes on device 0 (a constant and its negation, both made in
 * the control-dependency scope): two control transfers, which both nodes
 * share. */
static void test_control_inputs_share_a_transfer(void) {
  gr_graph *g = gr_graph_new();
  gr_output v[4], u[4];
  for (int k = 0; k < 4; k++) {
    gt_pin(g, k < 3 ? 1 : 2);
    char name[8];
    snprintf(name, sizeof name, "v%d", k);
    v[k] = gr_variable(g, name, gr_const_f32(g, (float)k));
    u[k] = gr_assign_add(g, v[k], gr_const_f32(g, 1));
    gr_graph_pop_device_scope(g);
  }
  gt_pin(g, 0);
  gr_graph_push_control_deps(g, u, 4);
  gr_output after = gr_neg(g, gr_const_f32(g, 2));
  gr_graph_pop_control_deps(g);
  gr_graph_pop_device_scope(g);
  assign_pinned(g);
  gr_partitions *ps = partition_all(g, NULL, 0, &after, 1);
  GR_CHECK_EQ_INT(ps->num_control_sends, 2);
  GR_CHECK_EQ_INT(ps->num_grouped_controls, 2);
  int sends[3] = {0, 0, 0}, recvs[3] = {0, 0, 0};
  for (int k = 0; k < ps->num_parts; k++)
    for (int dev = 0; dev < 3; dev++)
      if (!strcmp(ps->parts[k].device, gt_device_name(dev))) {
        sends[dev] = count_op(&ps->parts[k], "_send");
        recvs[dev] = count_op(&ps->parts[k], "_recv");
      }
  GR_CHECK(sends[0] == 0 && sends[1] == 1 && sends[2] == 1);
  GR_CHECK_MSG(recvs[0] == 2 && recvs[1] == 0 && recvs[2] == 0, "recvs %d %d %d", recvs[0],
               recvs[1], recvs[2]);
  for (int k = 0; k < 3; k++) GR_CHECK(gr_graph_error(ps->parts[k].graph) == NULL);
  gr_partitions_free(ps);
  gr_session *s = gt_session(g, 3, 2);
  gr_error err;
  for (int step = 0; s && step < 3; step++) {
    gr_tensor a;
    GR_CHECK_OK(gr_session_run(s, NULL, 0, &after, 1, &a, NULL, 0, &err), err);
    GR_CHECK(gr_tensor_get_f64(&a, 0) == -2);
    gr_tensor_release(&a);
  }
  gr_tensor out[4];
  if (s) GR_CHECK_OK(gr_session_run(s, NULL, 0, v, 4, out, NULL, 0, &err), err);
  for (int k = 0; k < 4 && s; k++) {
    GR_CHECK(gr_tensor_get_f64(&out[k], 0) == k + 3); /* every update ran in every step */
    gr_tensor_release(&out[k]);
  }
  gr_session_free(s);
  gr_graph_free(g);
}

/* An error on one device ends the step on every device with that error (not a
 * cancellation), while another device waits for a value that never comes. */
static void test_error_aborts_all_devices(void) {
  gr_graph *g = gr_graph_new();
  gt_pin(g, 0);
  gr_output idx = gr_placeholder(g, "idx", GR_I64, (gr_shape){1, {1}});
  gr_output params = gr_fill(g, GR_F32, (gr_shape){1, {4}}, 1.5);
  gr_output picked = gr_gather(g, params, idx, 0);
  gr_graph_pop_device_scope(g);
  gt_pin(g, 1);
  gr_output y = gr_add(g, gr_tanh(g, picked), gr_const_f32(g, 1));
  gr_graph_pop_device_scope(g);
  gt_pin(g, 2);
  gr_output w = gr_mul(g, y, y);
  gr_graph_pop_device_scope(g);
  for (int threads = 1; threads <= 2; threads++) {
    gr_session *s = gt_session(g, 3, threads);
    for (int rep = 0; rep < 20; rep++) {
      gr_tensor bad = gt_make(GR_I64, (gr_shape){1, {1}}, (double[]){rep % 2 ? 7 : 2}), out;
      gr_feed f = {idx, &bad};
      gr_error err;
      gr_status st = gr_session_run(s, &f, 1, &w, 1, &out, NULL, 0, &err);
      if (rep % 2) {
        GR_CHECK(st != GR_OK && st != GR_ERR_CANCELLED);
        GR_CHECK_STR_CONTAINS(err.msg, "gather");
      } else {
        GR_CHECK_OK(st, err);
        float v = tanhf(1.5f) + 1;
        GR_CHECK(gr_tensor_get_f64(&out, 0) == (double)(v * v));
        gr_tensor_release(&out);
      }
      gr_tensor_release(&bad);
    }
    gr_session_free(s);
  }
  gr_graph_free(g);
}

/* ---- random graphs ------------------------------------------------------------ */

static void test_random_graphs_match_one_device(void) {
  int cases = 0, spread = 0;
  for (uint64_t seed = 1; seed <= 1000; seed++) {
    bool with_cf = seed % 2 == 0;
    int devices = 2 + (int)(seed % 3);
    gt_rgraph one = gt_random_graph(seed, 0, 0, with_cf);
    gr_tensor want[6], got[6];
    gt_random_graph_run(&one, 1, 1, false, want);
    gr_graph_free(one.g);
    gt_rgraph many;
    if (seed % 4 == 1) { /* placed by the cost model on a local cluster */
      many = gt_random_graph(seed, 0, 0, with_cf);
      gr_cluster *c = gr_cluster_new_local(devices, 1e9, 1e9, 1e-7);
      gr_placer_options o = gr_placer_options_default();
      gr_error err;
      GR_CHECK_OK(gr_placer_place(many.g, c, &o, NULL, &err), err);
      gr_cluster_free(c);
    } else { /* pinned at random */
      many = gt_random_graph(seed, devices, seed * 31 + 5, with_cf);
    }
    /* every third case starts its receives late (recv scheduling) */
    gt_random_graph_run(&many, devices, 1 + (int)(seed % 2), seed % 3 == 1, got);
    char used[8] = {0};
    int nused = 0;
    for (int i = 0; i < gr_graph_num_nodes(many.g); i++) {
      const char *d = gr_graph_node(many.g, i)->assigned_device;
      int k = d ? d[strlen(d) - 1] - '0' : 0;
      if (d && !used[k]) nused++, used[k] = 1;
    }
    if (nused > 1) spread++;
    for (int i = 0; i < many.nf; i++) {
      GR_CHECK_MSG(gt_equal(&got[i], &want[i]), "seed %llu fetch %d differs",
                   (unsigned long long)seed, i);
      gr_tensor_release(&got[i]);
      gr_tensor_release(&want[i]);
    }
    gr_graph_free(many.g);
    cases++;
  }
  GR_CHECK_EQ_INT(cases, 1000);
  GR_CHECK_MSG(spread > 700, "only %d of 1000 cases used more than one device", spread);
}

/* A long chain whose every op is on the other device: each Send finds its
 * Recv waiting and completes it on the sending thread; the stack must not
 * grow with the chain (it would overflow long before 20000 hops), with and
 * without control flow in the partitions. */
static void test_long_ping_pong_chain(void) {
  for (int cf = 0; cf < 2; cf++) {
    gr_graph *g = gr_graph_new();
    gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){1, {2}});
    gr_output h = x;
    if (cf) { /* a cond in front makes every partition take the control-flow path */
      gt_pin(g, 0);
      gr_output outs;
      gt_branch_arg ba = {x, x, 1, 0};
      gr_cond(g, gr_greater(g, gr_reduce_sum(g, x, NULL, 0, false), gr_const_f32(g, 0)), gt_then_fn,
              gt_else_fn, &ba, 1, &outs);
      h = outs;
      gr_graph_pop_device_scope(g);
    }
    int hops = 20000;
    for (int i = 0; i < hops; i++) {
      gt_pin(g, i % 2);
      h = gr_neg(g, h);
      gr_graph_pop_device_scope(g);
    }
    GR_CHECK(gr_graph_error(g) == NULL);
    for (int threads = 1; threads <= 2; threads++) {
      gr_session *s = gt_session(g, 2, threads);
      gr_tensor xv = gt_make(GR_F32, (gr_shape){1, {2}}, (double[]){-1, -2}), out;
      gr_feed f = {x, &xv};
      gr_error err;
      GR_CHECK_OK(gr_session_run(s, &f, 1, &h, 1, &out, NULL, 0, &err), err);
      /* an even number of negations; the cond's else branch: x - relu(x) = x */
      GR_CHECK(gr_tensor_get_f64(&out, 0) == -1 && gr_tensor_get_f64(&out, 1) == -2);
      gr_tensor_release(&out);
      gr_tensor_release(&xv);
      gr_session_free(s);
    }
    gr_graph_free(g);
  }
}

/* Recv scheduling: device 1 runs a chain of stages and uses big_k (made on
 * device 0 at the start) only in stage k. With schedule_recvs, the receive of
 * big_k (k >= 1) waits for the chain to reach stage k - 1 or k instead of
 * starting with the step; results are unchanged, and the trace shows each
 * such receive starting after the node it waits for ended. */
static gr_graph *staged_graph(gr_output *x, gr_output *y) {
  gr_graph *g = gr_graph_new();
  gt_pin(g, 0);
  *x = gr_placeholder(g, "x", GR_F32, (gr_shape){2, {32, 32}});
  gr_output big[4];
  for (int k = 0; k < 4; k++) big[k] = gr_mul(g, *x, gr_const_f32(g, (float)(k + 1)));
  gr_graph_pop_device_scope(g);
  gt_pin(g, 1);
  gr_output h = gr_tanh(g, *x);
  for (int k = 0; k < 4; k++) {
    char scope[16];
    snprintf(scope, sizeof scope, "stage%d", k);
    gr_graph_push_name_scope(g, scope);
    for (int r = 0; r < 3; r++) h = gr_tanh(g, gr_matmul(g, h, h, false, true));
    h = gr_add(g, h, big[k]);
    gr_graph_pop_name_scope(g);
  }
  gr_graph_pop_device_scope(g);
  *y = h;
  GR_CHECK(gr_graph_error(g) == NULL);
  return g;
}

static void test_recv_scheduling(void) {
  gr_output x, y;
  gr_graph *g = staged_graph(&x, &y);
  gr_tensor xv = gt_random(&(gt_rng){3}, GR_F32, (gr_shape){2, {32, 32}}, -0.2, 0.2), out[2];
  gr_feed f = {x, &xv};
  gr_error err;
  for (int sched = 0; sched < 2; sched++) {
    gr_session_options o = {.num_devices = 2, .inter_op_threads = 2, .schedule_recvs = sched};
    gr_session *s = gr_session_new(g, &o, &err);
    gr_step_trace *tr = gr_step_trace_new();
    GR_CHECK_OK(gr_session_run_traced(s, &f, 1, &y, 1, &out[sched], NULL, 0, tr, &err), err);
    int checked = 0;
    for (int i = 0; i < gr_step_trace_count(tr); i++) {
      const gr_trace_event *e = gr_step_trace_event(tr, i);
      const gr_node *n = e->node;
      if (strncmp(n->name, "_recv/mul", 9) != 0) continue;
      int k = n->name[9] == '/' ? 0 : n->name[10] - '0'; /* _recv/mul/..., _recv/mul_K/... */
      if (!sched) {
        GR_CHECK_EQ_INT(n->num_control_inputs, 0);
        continue;
      }
      if (k == 0) continue;
      GR_CHECK_EQ_INT(n->num_control_inputs, 1);
      const gr_node *waits = n->control_inputs[0];
      char a[16], b[16];
      snprintf(a, sizeof a, "stage%d/", k - 1);
      snprintf(b, sizeof b, "stage%d/", k);
      GR_CHECK_MSG(strncmp(waits->name, a, strlen(a)) == 0 ||
                       strncmp(waits->name, b, strlen(b)) == 0,
                   "the receive of big_%d waits for '%s'", k, waits->name);
      for (int j = 0; j < gr_step_trace_count(tr); j++) {
        const gr_trace_event *w = gr_step_trace_event(tr, j);
        if (w->node != waits) continue;
        GR_CHECK(e->start_ns >= w->end_ns);
        checked++;
      }
    }
    if (sched) GR_CHECK_EQ_INT(checked, 3);
    gr_step_trace_free(tr);
    gr_session_free(s);
  }
  GR_CHECK(gt_equal(&out[0], &out[1]));
  gr_tensor_release(&out[0]);
  gr_tensor_release(&out[1]);
  gr_tensor_release(&xv);
  gr_graph_free(g);
}

/* Names longer than any fixed buffer: two tensors whose names share their
 * first 300 characters cross devices under keys of their own. */
static void test_long_names_cross_devices(void) {
  gr_graph *g = gr_graph_new();
  char scope[64];
  for (int k = 0; k < 12; k++) {
    snprintf(scope, sizeof scope, "a_rather_long_scope_name_%02d", k);
    gr_graph_push_name_scope(g, scope);
  }
  gt_pin(g, 0);
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){1, {2}});
  gr_output p = gr_neg(g, x), q = gr_mul(g, x, gr_const_f32(g, 3));
  gr_graph_pop_device_scope(g);
  gt_pin(g, 1);
  gr_output y = gr_sub(g, p, q);
  gr_graph_pop_device_scope(g);
  for (int k = 0; k < 12; k++) gr_graph_pop_name_scope(g);
  GR_CHECK(strlen(p.node->name) > 300);
  gr_session *s = gt_session(g, 2, 2);
  gr_tensor xv = gt_make(GR_F32, (gr_shape){1, {2}}, (double[]){1, -2}), out;
  gr_feed f = {x, &xv};
  gr_error err;
  GR_CHECK_OK(gr_session_run(s, &f, 1, &y, 1, &out, NULL, 0, &err), err);
  GR_CHECK(gr_tensor_get_f64(&out, 0) == -4 && gr_tensor_get_f64(&out, 1) == 8);
  GR_CHECK_EQ_INT(gr_session_last_transfers(s).sends, 2);
  gr_tensor_release(&out);
  gr_tensor_release(&xv);
  gr_session_free(s);
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_one_pair_per_tensor_and_device);
  GR_RUN(test_target_group_waits_on_its_device);
  GR_RUN(test_control_inputs_share_a_transfer);
  GR_RUN(test_error_aborts_all_devices);
  GR_RUN(test_long_ping_pong_chain);
  GR_RUN(test_recv_scheduling);
  GR_RUN(test_long_names_cross_devices);
  GR_RUN(test_random_graphs_match_one_device);
  return gr_test_finish();
}
