/* Colocation groups (core/gr_colocation.h) and the one rule every placement
 * obeys: a resource and every node that uses it run on one device (a
 * variable with its initialiser, reads and updates; a loop gradient's stack
 * with its pushes and pops; a queue with its ops; colocate_with), in the
 * placer's cost mode (its local search and every candidate it compares
 * with) and round-robin mode, in a session's pins with soft placement, and
 * checked again by the partitioner. */
#include <graphrun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_engine.h"
#include "gr_test.h"
#include "test_util.h"

/* A variable in a loop and the loop's gradient (stacks), a queue and its
 * ops, a colocate_with block. */
static const char *program = "a = variable(const(3.0))\n"
                             "v = const(2.0)\n"
                             "r = while (x = v; x < 100.0) { x = x * a }\n"
                             "ga, gv = gradients(r, [a, v])\n"
                             "q = fifo_queue([f32], capacity=4)\n"
                             "e = queue_enqueue(q, ga)\n"
                             "control_dependencies(e) { d = queue_dequeue(q) }\n"
                             "colocate_with(a) { t = a * 2.0 }\n"
                             "fetch ga, gv, d, t\n";

static gr_dsl_program *load(const char *text, gr_graph **g) {
  gr_error err;
  gr_dsl_program *p = NULL;
  *g = gr_graph_new();
  GR_CHECK_OK(gr_dsl_load_string("t.gr", text, *g, NULL, &p, &err), err);
  return p;
}

static gr_node *find_op(gr_graph *g, const char *op, int k) {
  for (int i = 0; i < gr_graph_num_nodes(g); i++) {
    gr_node *n = gr_graph_node(g, i);
    if (strcmp(n->op->name, op) == 0 && k-- == 0) return n;
  }
  return NULL;
}

/* The groups: a variable with its initialiser and reads, stacks with their
 * pushes and pops, a queue with its ops, colocate_with; a gradient's hint
 * joins nothing. */
static void test_groups(void) {
  gr_graph *g;
  gr_dsl_program *p = load(program, &g);
  gr_colocation c;
  gr_error err;
  GR_CHECK_OK(gr_colocation_compute(g, false, &c, &err), err);
  gr_node *a = gr_graph_find_node(g, "a"), *init = gr_graph_find_node(g, "a/init");
  GR_CHECK(a && init && c.group[a->id] == c.group[init->id]);
  GR_CHECK(c.follows[init->id] && !c.follows[a->id]);
  int pushes = 0;
  for (gr_node *push; (push = find_op(g, "stack_push", pushes)); pushes++) {
    const char *stack = gr_node_attr_string(push, "stack", "");
    for (int i = 0; i < gr_graph_num_nodes(g); i++) {
      gr_node *n = gr_graph_node(g, i);
      if (strcmp(gr_node_attr_string(n, "stack", ""), stack) == 0)
        GR_CHECK_MSG(c.group[n->id] == c.group[push->id], "%s and %s", n->name, push->name);
    }
    GR_CHECK_EQ_INT(c.follows[push->id], 0); /* a stack has no maker: every member decides */
  }
  GR_CHECK(pushes >= 2); /* the count stack and a value stack */
  gr_node *q = gr_graph_find_node(g, "q"), *enq = find_op(g, "queue_enqueue", 0),
          *deq = find_op(g, "queue_dequeue", 0);
  GR_CHECK(q && enq && deq && c.group[q->id] == c.group[enq->id] &&
           c.group[q->id] == c.group[deq->id]);
  gr_output t;
  GR_CHECK(gr_dsl_lookup(p, "t", &t) && c.group[t.node->id] == c.group[a->id]);
  GR_CHECK(c.group[q->id] != c.group[a->id]);
  /* gradient nodes carry a hint to their forward op, and join no group by it */
  int hinted = 0;
  for (int i = 0; i < gr_graph_num_nodes(g); i++) {
    gr_node *n = gr_graph_node(g, i);
    if (!n->colocate_hint) continue;
    hinted++;
    gr_node *fwd = gr_graph_find_node(g, n->colocate_with);
    if (c.size[n->id] == 1) GR_CHECK(c.group[n->id] != c.group[fwd->id]);
  }
  GR_CHECK_MSG(hinted >= 5, "%d hinted", hinted);
  char why[300];
  GR_CHECK_STR_CONTAINS(gr_colocation_why(init, why, sizeof why), "uses variable 'a'");
  GR_CHECK_STR_CONTAINS(gr_colocation_why(t.node, why, sizeof why), "colocate_with 'a'");
  gr_colocation_free(&c);
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

/* Whether every group of the graph's needed nodes sits on one device. */
static bool groups_together(gr_graph *g) {
  gr_colocation c;
  gr_error err;
  if (gr_colocation_compute(g, true, &c, &err) != GR_OK) return false;
  bool ok = true;
  for (int i = 0; i < gr_graph_num_nodes(g); i++) {
    const gr_node *n = gr_graph_node(g, i), *r = gr_graph_node(g, c.group[i]);
    if (n->assigned_device && r->assigned_device &&
        strcmp(n->assigned_device, r->assigned_device) != 0) {
      fprintf(stderr, "  %s on %s, %s on %s\n", n->name, n->assigned_device, r->name,
              r->assigned_device);
      ok = false;
    }
  }
  gr_colocation_free(&c);
  return ok;
}

/* Runs the program's fetches on a session of `devices` local devices with
 * soft placement; false on error. */
static bool run(gr_graph *g, gr_dsl_program *p, int devices, gr_tensor *out) {
  gr_error err;
  gr_session_options o = {.num_devices = devices,
                          .inter_op_threads = 2,
                          .soft_placement = true,
                          .step_timeout_ms = 60000,
                          .log_fn = NULL};
  gr_session *s = gr_session_new(g, &o, &err);
  if (!s) return false;
  gr_output f[4];
  const char *names[4] = {"ga", "gv", "d", "t"};
  for (int i = 0; i < 4; i++) GR_CHECK(gr_dsl_lookup(p, names[i], &f[i]));
  bool ok = gr_session_run(s, NULL, 0, f, 4, out, NULL, 0, &err) == GR_OK;
  if (!ok) fprintf(stderr, "  run on %d devices: %s\n", devices, err.msg);
  gr_session_free(s);
  return ok;
}

/* Every placement mode, and random pins on every node, keep the groups
 * together and give the one-device bits. */
static void test_every_mode_keeps_groups(void) {
  gr_graph *g1;
  gr_dsl_program *p1 = load(program, &g1);
  gr_tensor want[4];
  GR_CHECK(run(g1, p1, 1, want));
  GR_CHECK(gr_tensor_get_f64(&want[0], 0) == 216.0 && gr_tensor_get_f64(&want[1], 0) == 81.0);
  gr_dsl_program_free(p1);
  gr_graph_free(g1);
  for (int trial = 0; trial < 24; trial++) {
    gr_graph *g;
    gr_dsl_program *p = load(program, &g);
    gr_error err;
    int mode = trial % 3; /* round-robin, cost, random pins */
    if (mode == 0) GR_CHECK_OK(gr_placer_assign(g, NULL, 3, GR_PLACE_ROUND_ROBIN, true, &err), err);
    if (mode == 1) GR_CHECK_OK(gr_placer_assign(g, NULL, 3, GR_PLACE_COST, true, &err), err);
    if (mode == 2) {
      gt_rng r = {(uint64_t)trial * 7919 + 1};
      for (int i = 0; i < gr_graph_num_nodes(g); i++)
        gr_graph_node(g, i)->requested_device = gt_device_name((int)gt_int(&r, 0, 2));
    }
    gr_tensor got[4];
    GR_CHECK_MSG(run(g, p, 3, got), "trial %d (mode %d)", trial, mode);
    GR_CHECK_MSG(groups_together(g), "trial %d (mode %d)", trial, mode);
    for (int i = 0; i < 4; i++) {
      GR_CHECK_MSG(gt_bit_equal(&got[i], &want[i]), "trial %d fetch %d", trial, i);
      gr_tensor_release(&got[i]);
    }
    gr_dsl_program_free(p);
    gr_graph_free(g);
  }
  for (int i = 0; i < 4; i++) gr_tensor_release(&want[i]);
}

/* Three variables (layers), one in a loop (its gradient's stacks), a queue
 * and a colocate_with block. */
static const char *layered = "a = variable(const(3.0))\n"
                             "b = variable(const(5.0))\n"
                             "c = variable(const(7.0))\n"
                             "r = while (x = const(2.0); x < 100.0) { x = x * a }\n"
                             "lb = b * b * b\n"
                             "lc = c * c * c\n"
                             "ga, gv, gc = gradients(r + lb + lc, [a, b, c])\n"
                             "q = fifo_queue([f32], capacity=4)\n"
                             "e = queue_enqueue(q, gv)\n"
                             "control_dependencies(e) { d = queue_dequeue(q) }\n"
                             "colocate_with(c) { t = c * 2.0 }\n"
                             "fetch ga, gv, d, t\n";

/* The cost placer's local search and every candidate it compares with (one
 * task, pins only, by layer), each written to the graph, keep the groups
 * together and give the one-device bits, on three slow devices: with costly
 * transfers (where the search keeps a move) and with free ones. */
static void test_search_and_candidates_keep_groups(void) {
  gr_graph *g1;
  gr_dsl_program *p1 = load(layered, &g1);
  gr_tensor want[4];
  GR_CHECK(run(g1, p1, 1, want));
  gr_dsl_program_free(p1);
  gr_graph_free(g1);
  for (int trial = 0; trial < 2; trial++) {
    gr_graph *g;
    gr_dsl_program *p = load(layered, &g);
    gr_cluster *c = gr_cluster_new_local(3, 1e6, 1e10, 1e-6);
    gr_cluster_set_link(c, GR_LINK_SAME_TASK,
                        (gr_link){.latency = trial ? 1e-9 : 1e-4, .bandwidth = 1e12});
    gr_placer_options o = gr_placer_options_default();
    gr_output f[4];
    const char *names[4] = {"ga", "gv", "d", "t"};
    for (int i = 0; i < 4; i++) GR_CHECK(gr_dsl_lookup(p, names[i], &f[i]));
    o.fetches = f, o.num_fetches = 4;
    o.soft_placement = true, o.search = true, o.min_gain = 0, o.explain = true;
    gr_placement *pl = NULL;
    gr_error err;
    GR_CHECK_OK(gr_placer_place(g, c, &o, &pl, &err), err);
    char *text = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&text, &len);
    GR_CHECK(mf != NULL);
    if (mf && pl) gr_placement_explain(pl, mf), fclose(mf);
    const char *ls = text ? strstr(text, "local search: ") : NULL;
    int sims = 0, moves = 0;
    GR_CHECK_MSG(ls && sscanf(ls, "local search: %d simulations, %d moves", &sims, &moves) == 2,
                 "trial %d: %s", trial, text ? text : "");
    GR_CHECK_MSG(sims > 0 && (trial || moves > 0), "trial %d: %d simulations, %d moves", trial,
                 sims, moves);
    GR_CHECK_MSG(groups_together(g), "trial %d: the placement returned", trial);
    for (int k = 0; pl && k < GR_PLACE_CAND_COUNT; k++) {
      GR_CHECK_OK(gr_placement_apply(pl, (gr_place_candidate)k, &err), err);
      GR_CHECK_MSG(groups_together(g), "trial %d candidate %s", trial,
                   gr_place_candidate_name((gr_place_candidate)k));
      gr_tensor got[4];
      GR_CHECK_MSG(run(g, p, 3, got), "trial %d candidate %d", trial, k);
      for (int i = 0; i < 4; i++) {
        GR_CHECK_MSG(gt_bit_equal(&got[i], &want[i]), "trial %d candidate %d fetch %d", trial, k,
                     i);
        gr_tensor_release(&got[i]);
      }
    }
    free(text);
    gr_placement_free(pl);
    gr_cluster_free(c);
    gr_dsl_program_free(p);
    gr_graph_free(g);
  }
  for (int i = 0; i < 4; i++) gr_tensor_release(&want[i]);
}

/* The partitioner refuses a placement that splits a group, naming both
 * nodes and the resource, whoever assigned the devices. */
static void test_partitioner_refuses_split(void) {
  gr_graph *g;
  gr_dsl_program *p = load("w = variable(const(1.0))\nu = assign_add(w, const(2.0))\n"
                           "fetch u\n",
                           &g);
  gr_node *nodes[8];
  int n = 0;
  for (int i = 0; i < gr_graph_num_nodes(g) && n < 8; i++) {
    gr_node *v = gr_graph_node(g, i);
    v->assigned_device = gt_device_name(strcmp(v->op->name, "assign_add") == 0);
    nodes[n++] = v;
  }
  gr_partitions *parts = NULL;
  gr_error err;
  gr_output fetch;
  GR_CHECK(gr_dsl_lookup(p, "u", &fetch));
  GR_CHECK(gr_partition_graph(nodes, n, NULL, 0, &fetch, 1, NULL, &parts, &err) ==
           GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'w/init'");
  GR_CHECK_STR_CONTAINS(err.msg, "node 'u'");
  GR_CHECK_STR_CONTAINS(err.msg, "uses variable 'w'");
  GR_CHECK_STR_CONTAINS(err.msg, gt_device_name(1));
  GR_CHECK(parts == NULL);
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

/* The DSL's colocate_with ignores the enclosing device scope (as
 * TensorFlow's); a pin written inside the block that contradicts the
 * group's is an error naming both nodes, or under soft placement the first
 * pin wins. */
static void test_colocate_with_block(void) {
  const char *text = "device \"/device:CPU:1\" { w = variable(const(1.0)) }\n"
                     "device \"/device:CPU:0\" { colocate_with(w) { t = w * 2.0 } }\n"
                     "fetch t\n";
  gr_graph *g;
  gr_dsl_program *p = load(text, &g);
  gr_output t;
  GR_CHECK(gr_dsl_lookup(p, "t", &t) && t.node->requested_device[0] == '\0');
  gr_error err;
  gr_session *s = gt_session(g, 2, 1);
  GR_CHECK_OK(gr_session_place_nodes(s, &t.node, 1, &err), err);
  GR_CHECK_STR_CONTAINS(t.node->assigned_device, "CPU:1");
  gr_session_free(s);
  gr_dsl_program_free(p);
  gr_graph_free(g);
  text = "device \"/device:CPU:1\" { w = variable(const(1.0)) }\n"
         "colocate_with(w) { device \"/device:CPU:0\" { t = w * 2.0 } }\n"
         "fetch t\n";
  p = load(text, &g);
  GR_CHECK(gr_dsl_lookup(p, "t", &t));
  gr_colocation c;
  GR_CHECK(gr_colocation_compute(g, false, &c, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'w' (device '/device:CPU:1')");
  GR_CHECK_STR_CONTAINS(err.msg, "(device '/device:CPU:0')");
  GR_CHECK_STR_CONTAINS(err.msg, "colocate_with 'w'");
  GR_CHECK_OK(gr_colocation_compute(g, true, &c, &err), err);
  GR_CHECK(c.dropped[t.node->id]);
  gr_colocation_free(&c);
  gr_dsl_program_free(p);
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_groups);
  GR_RUN(test_every_mode_keeps_groups);
  GR_RUN(test_search_and_candidates_keep_groups);
  GR_RUN(test_partitioner_refuses_split);
  GR_RUN(test_colocate_with_block);
  return gr_test_finish();
}
