/* The executor's urgency rule (docs/internals.md, "The executor"): a node
 * on a path to a data send or a collective goes before a node that is not,
 * whether it waits on the thread's own ready stack or in the run's shared
 * queue. Two devices in one process, one thread each (inter_op_threads 1:
 * no pool), so the order is the rule's and not a race; the order is read
 * from a step trace. */
#include <graphrun.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gr_test.h"
#include "test_util.h"

/* ---- a test op: an expensive identity that can set and wait for flags ---- */

enum { FLAG_STARTED, FLAG_SENT, NUM_FLAGS };
static int flags[NUM_FLAGS];

/* Sets flag "set" (-1: none), then waits for flag "wait" (-1: none) for at
 * most 60 s; then passes its input on. */
static gr_status gate_kernel(gr_kernel_ctx *ctx) {
  int set = (int)gr_node_attr_int(ctx->node, "set", -1);
  int wait = (int)gr_node_attr_int(ctx->node, "wait", -1);
  if (set >= 0) __atomic_store_n(&flags[set], 1, __ATOMIC_SEQ_CST);
  for (int k = 0; wait >= 0 && !__atomic_load_n(&flags[wait], __ATOMIC_SEQ_CST); k++) {
    if (k == 600000) return gr_kernel_error(ctx, GR_ERR_ABORTED, "flag %d never set", wait);
    usleep(100);
  }
  gr_kernel_set_output(ctx, 0, &ctx->inputs[0]);
  return GR_OK;
}

static const gr_attr_spec gate_attrs[] = {
    {"set", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = -1}},
    {"wait", GR_ATTR_INT, false, {.type = GR_ATTR_INT, .i = -1}}};
static const gr_op_def test_gate =
    GT_UNARY_OP_DEF("test_gate", gate_kernel, gate_attrs, 2, GR_OP_EXPENSIVE | GR_OP_STATEFUL);

static gr_output gate(gr_graph *g, const char *name, gr_output x, int set, int wait) {
  gr_attr a[2] = {gr_attr_int("set", set), gr_attr_int("wait", wait)};
  return gr_op(g, "test_gate", name, &x, 1, a, 2);
}

/* Runs the step fetching outs[0..n) and checks from its trace that node
 * `first` started before node `then` (why: what it means when not). */
static void check_order(gr_graph *g, const gr_output *outs, int n, const char *first,
                        const char *then, const char *why) {
  memset(flags, 0, sizeof flags);
  gr_session *s = gt_session(g, 2, 1);
  gr_step_trace *t = gr_step_trace_new();
  gr_tensor vals[4];
  gr_error err;
  bool ok = t && gr_session_run_traced(s, NULL, 0, outs, n, vals, NULL, 0, t, &err) == GR_OK;
  GR_CHECK_MSG(ok, "run failed: %s", t ? err.msg : "out of memory");
  int64_t a = -1, b = -1;
  for (int i = 0; ok && i < gr_step_trace_count(t); i++) {
    const gr_trace_event *e = gr_step_trace_event(t, i);
    if (!strcmp(e->node->name, first)) a = e->start_ns;
    if (!strcmp(e->node->name, then)) b = e->start_ns;
  }
  if (ok) {
    GR_CHECK_MSG(a >= 0 && b >= 0, "%s or %s did not run", first, then);
    GR_CHECK_MSG(a < b, "%s", why);
  }
  for (int k = 0; ok && k < n; k++) gr_tensor_release(&vals[k]);
  gr_step_trace_free(t);
  gr_session_free(s);
}

/* ---- tests ------------------------------------------------------------------ */

/* On device 0, two expensive nodes are ready together on the thread's own
 * stack: "other", which only device 0 uses, and "upstream", whose value
 * reaches a send through a cheap node (two hops: the old rule, "output
 * goes straight to a send", missed it). upstream runs first, in whichever
 * order the two were built. */
static void test_upstream_of_send_first_on_stack(void) {
  for (int upstream_first = 0; upstream_first < 2; upstream_first++) {
    gr_graph *g = gr_graph_new();
    gt_pin(g, 0);
    gr_output x = gr_const_f32(g, 3);
    gr_output up, other;
    if (upstream_first) {
      up = gate(g, "upstream", x, -1, -1);
      other = gate(g, "other", x, -1, -1);
    } else {
      other = gate(g, "other", x, -1, -1);
      up = gate(g, "upstream", x, -1, -1);
    }
    gr_output sent = gr_neg(g, up);
    gr_graph_pop_device_scope(g);
    gt_pin(g, 1);
    gr_output far = gr_neg(g, sent);
    gr_graph_pop_device_scope(g);
    check_order(g, (gr_output[]){other, far}, 2, "upstream", "other",
                upstream_first ? "built first, the node upstream of the send ran after the other"
                               : "built second, the node upstream of the send ran after the other");
    gr_graph_free(g);
  }
}

/* A collective's member is waited for like a send: on each device the
 * node whose value goes into the all-reduce (through a cheap node) runs
 * before one that only this device uses, in whichever order they were
 * built. */
static void test_upstream_of_collective_first(void) {
  for (int upstream_first = 0; upstream_first < 2; upstream_first++) {
    gr_graph *g = gr_graph_new();
    gr_output in[2], sum[2], other[2];
    char name[2][32];
    for (int d = 0; d < 2; d++) {
      gt_pin(g, d);
      gr_output x = gr_const_f32(g, (float)d + 1);
      snprintf(name[d], sizeof name[d], "upstream_%d", d);
      if (!upstream_first) other[d] = gate(g, d ? "other_1" : "other_0", x, -1, -1);
      in[d] = gr_neg(g, gate(g, name[d], x, -1, -1));
      if (upstream_first) other[d] = gate(g, d ? "other_1" : "other_0", x, -1, -1);
      gr_graph_pop_device_scope(g);
    }
    GR_CHECK(gr_all_reduce(g, in, 2, (const char *[]){gt_device_name(0), gt_device_name(1)},
                           GR_REDUCE_SUM, sum) == GR_OK);
    check_order(g, (gr_output[]){sum[0], sum[1], other[0], other[1]}, 4, "upstream_0", "other_0",
                "the node upstream of the all-reduce ran after the other one");
    gr_graph_free(g);
  }
}

/* An urgent expensive node goes before a cheap node that is not urgent
 * (in a pipeline stage, an apply_sgd and its control send held up the
 * gradient the previous stage waited for); cheap nodes still go first when
 * nothing urgent is ready (test_cheap_before_expensive in
 * test_executor.c). */
static void test_urgent_before_cheap(void) {
  gr_graph *g = gr_graph_new();
  gt_pin(g, 0);
  gr_output x = gr_const_f32(g, 3);
  gr_output sent = gr_neg(g, gate(g, "upstream", x, -1, -1));
  gr_output local = gr_op(g, "neg", "local", &x, 1, NULL, 0);
  gr_graph_pop_device_scope(g);
  gt_pin(g, 1);
  gr_output far = gr_neg(g, sent);
  gr_graph_pop_device_scope(g);
  check_order(g, (gr_output[]){local, far}, 2, "upstream", "local",
              "a cheap node that no device waits for ran before the one upstream of a send");
  gr_graph_free(g);
}

/* Device 1's thread runs a chain of expensive nodes that only device 1
 * uses (hold -> after). While it runs hold, the value of device 0 arrives
 * (on device 0's thread, a thread that is not device 1's own) and makes
 * "urgent" ready, whose result goes back to device 0: it waits in device
 * 1's shared queue. When hold ends, "after" is ready on the thread's own
 * stack; urgent must run before it. hold waits until device 0 has sent
 * (flag SENT, set by a node that runs after the send), and device 0 sends
 * only once hold has started (flag STARTED), so the order of arrival is
 * fixed. */
static void test_urgent_from_shared_queue_first(void) {
  gr_graph *g = gr_graph_new();
  gt_pin(g, 1);
  gr_output after =
      gate(g, "after", gate(g, "hold", gr_const_f32(g, 1), FLAG_STARTED, FLAG_SENT), -1, -1);
  gr_graph_pop_device_scope(g);
  gt_pin(g, 0);
  gr_output v = gr_neg(g, gate(g, "wait_started", gr_const_f32(g, 2), -1, FLAG_STARTED));
  gr_output sent_mark = gate(g, "sent_mark", v, FLAG_SENT, -1); /* after v's send: cheap first */
  gr_graph_pop_device_scope(g);
  gt_pin(g, 1);
  gr_output back = gr_neg(g, gate(g, "urgent", v, -1, -1));
  gr_graph_pop_device_scope(g);
  gt_pin(g, 0);
  gr_output home = gr_neg(g, back);
  gr_graph_pop_device_scope(g);
  check_order(g, (gr_output[]){after, sent_mark, home}, 3, "urgent", "after",
              "the node the other device waits for ran after the thread's own node");
  gr_graph_free(g);
}

int main(void) {
  gr_error err;
  gr_ops_register_all();
  gr_op_registry_add(&test_gate, &err);
  GR_RUN(test_upstream_of_send_first_on_stack);
  GR_RUN(test_upstream_of_collective_first);
  GR_RUN(test_urgent_before_cheap);
  GR_RUN(test_urgent_from_shared_queue_first);
  return gr_test_finish();
}
