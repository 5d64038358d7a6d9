/* Placing real graphs: pins honoured exactly, colocation groups (variables
 * with their updates, colocate_with), conflicts naming both nodes and specs,
 * soft placement, the explanation, the cost model and the profile database. */
#include <graphrun.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gr_test.h"
#include "placer/gr_placer.h"

static const char *cluster_json =
    "{\"jobs\": {\"ps\": [{\"host\": \"a\", \"devices\": [{\"flops\": 1e10}]}],\n"
    "            \"worker\": [{\"host\": \"a\", \"devices\": [{\"flops\": 1e10, \"count\": 2}]},\n"
    "                         {\"host\": \"b\", \"devices\": [{\"flops\": 1e10, \"count\": 2}]}]}}";

static gr_cluster *cluster(void) {
  gr_cluster *c = NULL;
  gr_error err;
  GR_CHECK_OK(gr_cluster_parse_json(cluster_json, strlen(cluster_json), "c.json", &c, &err), err);
  return c;
}

#define PS  "/job:ps/replica:0/task:0/device:CPU:0"
#define W01 "/job:worker/replica:0/task:0/device:CPU:1"
#define W11 "/job:worker/replica:0/task:1/device:CPU:1"

/* gr_placement_explain's text (free it). */
static char *explain_text(const gr_placement *p) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  GR_CHECK(f != NULL);
  gr_placement_explain(p, f);
  fclose(f);
  return text;
}

/* x -> matmul(w1) -> relu -> matmul(w2) -> softmax; w1, w2 variables with updates. */
typedef struct model {
  gr_graph *g;
  gr_output x, w1, w2, h, y, upd1, upd2;
} model;

static model build(const char *w1_dev, const char *h_dev, const char *upd1_dev) {
  model m;
  gr_graph *g = m.g = gr_graph_new();
  m.x = gr_placeholder(g, "x", GR_F32, (gr_shape){2, {-1, 256}});
  if (w1_dev) gr_graph_push_device_scope(g, w1_dev);
  m.w1 = gr_variable(g, "w1", gr_zeros(g, GR_F32, (gr_shape){2, {256, 128}}));
  if (w1_dev) gr_graph_pop_device_scope(g);
  m.w2 = gr_variable(g, "w2", gr_zeros(g, GR_F32, (gr_shape){2, {128, 10}}));
  if (h_dev) gr_graph_push_device_scope(g, h_dev);
  m.h = gr_relu(g, gr_matmul(g, m.x, m.w1, false, false));
  if (h_dev) gr_graph_pop_device_scope(g);
  m.y = gr_softmax(g, gr_matmul(g, m.h, m.w2, false, false));
  if (upd1_dev) gr_graph_push_device_scope(g, upd1_dev);
  m.upd1 = gr_assign_sub(g, m.w1, gr_zeros(g, GR_F32, (gr_shape){2, {256, 128}}));
  if (upd1_dev) gr_graph_pop_device_scope(g);
  m.upd2 = gr_assign_add(g, m.w2, gr_zeros(g, GR_F32, (gr_shape){2, {128, 10}}));
  if (gr_graph_error(m.g)) fprintf(stderr, "build: %s\n", gr_graph_error(m.g)->msg);
  GR_CHECK(!gr_graph_error(m.g));
  return m;
}

static void test_pins_exact(void) {
  gr_cluster *c = cluster();
  model m = build("/job:ps", W11, NULL);
  gr_error err;
  gr_placement *p = NULL;
  GR_CHECK_OK(gr_placer_place(m.g, c, NULL, &p, &err), err);
  for (int i = 0; i < gr_graph_num_nodes(m.g); i++) {
    const gr_node *n = gr_graph_node(m.g, i);
    GR_CHECK_MSG(n->assigned_device && gr_cluster_find_device(c, n->assigned_device) >= 0,
                 "node %s: '%s'", n->name, n->assigned_device ? n->assigned_device : "(null)");
    GR_CHECK_EQ_INT(gr_placement_device_of(p, i), gr_cluster_find_device(c, n->assigned_device));
  }
  GR_CHECK(strcmp(m.w1.node->assigned_device, PS) == 0);
  GR_CHECK(strcmp(m.h.node->assigned_device, W11) == 0);
  GR_CHECK(strcmp(m.h.node->inputs[0].node->assigned_device, W11) == 0); /* the matmul */
  /* w1's updates follow the variable (shared attr "var") */
  GR_CHECK(strcmp(m.upd1.node->assigned_device, PS) == 0);
  GR_CHECK(strcmp(gr_graph_find_node(m.g, "w1/init")->assigned_device, PS) == 0);
  /* w2 and its update share a device */
  GR_CHECK(strcmp(m.w2.node->assigned_device, m.upd2.node->assigned_device) == 0);
  GR_CHECK(gr_placement_step_time(p) > 0);
  gr_placement_free(p);
  gr_graph_free(m.g);
  /* legacy form and partial specs */
  m = build("/job:worker/task:0/cpu:1", "/job:worker", NULL);
  GR_CHECK_OK(gr_placer_place(m.g, c, NULL, NULL, &err), err);
  GR_CHECK(strcmp(m.w1.node->assigned_device, W01) == 0);
  GR_CHECK_STR_CONTAINS(m.h.node->assigned_device, "/job:worker/");
  gr_graph_free(m.g);
  gr_cluster_free(c);
}

static void test_unsatisfiable_pin(void) {
  gr_cluster *c = cluster();
  model m = build(NULL, "/job:worker/task:7", NULL);
  gr_error err;
  GR_CHECK(gr_placer_place(m.g, c, NULL, NULL, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'matmul'");
  GR_CHECK_STR_CONTAINS(err.msg, "'/job:worker/task:7'");
  GR_CHECK_STR_CONTAINS(err.msg, PS);
  GR_CHECK_STR_CONTAINS(err.msg, "soft placement is off");
  for (int i = 0; i < gr_graph_num_nodes(m.g); i++)
    GR_CHECK(gr_graph_node(m.g, i)->assigned_device == NULL);
  /* soft placement: placed anyway, and the explanation says the pin was dropped */
  gr_placer_options o = gr_placer_options_default();
  o.soft_placement = true;
  o.explain = true;
  gr_placement *p = NULL;
  GR_CHECK_OK(gr_placer_place(m.g, c, &o, &p, &err), err);
  GR_CHECK(m.h.node->assigned_device != NULL);
  char *text = explain_text(p);
  GR_CHECK_STR_CONTAINS(text, "pin '/job:worker/task:7' ignored: soft placement");
  /* both nodes of the scope (matmul and relu) say so */
  const char *second = strstr(text, "ignored: soft placement");
  GR_CHECK(second && strstr(second + 1, "ignored: soft placement"));
  free(text);
  gr_placement_free(p);
  gr_graph_free(m.g);
  gr_cluster_free(c);
}

/* An op that uses a variable follows it whatever device scope it was built
 * in (TensorFlow's colocation of resource ops); one rule for the placer and
 * the session's pins. */
static void test_resource_user_follows(void) {
  gr_cluster *c = cluster();
  model m = build("/job:ps", NULL, "/job:worker/task:0");
  gr_placer_options o = gr_placer_options_default();
  o.explain = true;
  gr_placement *p = NULL;
  gr_error err;
  GR_CHECK_OK(gr_placer_place(m.g, c, &o, &p, &err), err);
  GR_CHECK(strcmp(m.upd1.node->assigned_device, PS) == 0);
  GR_CHECK(strcmp(gr_graph_find_node(m.g, "w1/init")->assigned_device, PS) == 0);
  char *text = explain_text(p);
  GR_CHECK_STR_CONTAINS(text, "pin '/job:worker/task:0' ignored: it follows the resource it uses");
  free(text);
  gr_placement_free(p);
  gr_graph_free(m.g);
  gr_cluster_free(c);
}

/* Two explicit requests that cannot both hold: a colocate_with and a pin on
 * the same op that contradicts the group's. An error naming both, or under
 * soft placement the first pin wins. */
static void test_conflict(void) {
  gr_cluster *c = cluster();
  model m = build("/job:ps", NULL, NULL);
  gr_graph_push_device_scope(m.g, "/job:worker/task:0");
  gr_output q = gr_neg(m.g, m.x);
  gr_graph_pop_device_scope(m.g);
  GR_CHECK_OK(gr_graph_set_colocation(m.g, q.node, "w1"), *gr_graph_error(m.g));
  gr_error err;
  GR_CHECK(gr_placer_place(m.g, c, NULL, NULL, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "colocation conflict");
  GR_CHECK_STR_CONTAINS(err.msg, "node 'w1' (device '/job:ps')");
  GR_CHECK_STR_CONTAINS(err.msg, "node 'neg' (device '/job:worker/task:0')");
  GR_CHECK_STR_CONTAINS(err.msg, "colocate_with 'w1'");
  gr_placer_options o = gr_placer_options_default();
  o.soft_placement = true;
  GR_CHECK_OK(gr_placer_place(m.g, c, &o, NULL, &err), err);
  GR_CHECK(strcmp(q.node->assigned_device, PS) == 0); /* the first pin wins */
  gr_graph_free(m.g);
  gr_cluster_free(c);
}

static void test_malformed_pin(void) {
  gr_cluster *c = cluster();
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){1, {4}});
  gr_output y = gr_neg(g, x);
  /* a device scope with a bad spec is refused by the graph; set it directly */
  y.node->requested_device = "/job:w/bogus:1";
  gr_error err;
  GR_CHECK(gr_placer_place(g, c, NULL, NULL, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "node 'neg'");
  GR_CHECK_STR_CONTAINS(err.msg, "bogus");
  gr_graph_free(g);
  gr_cluster_free(c);
}

static void test_colocate_with_and_explain(void) {
  gr_cluster *c = cluster();
  model m = build("/job:worker/task:1/device:CPU:0", NULL, NULL);
  GR_CHECK_OK(gr_graph_set_colocation(m.g, m.y.node, "relu"), *gr_graph_error(m.g));
  gr_placer_options o = gr_placer_options_default();
  o.explain = true;
  gr_placement *p = NULL;
  gr_error err;
  GR_CHECK_OK(gr_placer_place(m.g, c, &o, &p, &err), err);
  GR_CHECK(strcmp(m.y.node->assigned_device, m.h.node->assigned_device) == 0);
  char *text = explain_text(p);
  GR_CHECK_STR_CONTAINS(text, "w1  d3 ");
  GR_CHECK_STR_CONTAINS(text, "pinned '/job:worker/task:1/device:CPU:0'");
  GR_CHECK_STR_CONTAINS(text, "colocated with w1");
  GR_CHECK_STR_CONTAINS(text, "# d0 = " PS);
  GR_CHECK_STR_CONTAINS(text, "predicted step time: ");
  GR_CHECK_STR_CONTAINS(text, "bytes crossing devices: ");
  GR_CHECK(strstr(text, "earliest finish: d0=") || strstr(text, "simpler placement was faster"));
  free(text);
  gr_placement_free(p);
  gr_graph_free(m.g);
  gr_cluster_free(c);
}

static void test_refusals(void) {
  gr_cluster *c = cluster();
  gr_graph *g = gr_graph_new();
  gr_output a = gr_placeholder(g, "a", GR_F32, (gr_shape){1, {4}});
  gr_output b = gr_neg(g, a), d = gr_abs(g, b);
  gr_error err;
  /* The graph only lets control inputs point back, so forge the arrays to
   * check the placer's own defences: an acyclic forward dependency is
   * ordered, a cycle is refused. */
  gr_output p0 = gr_placeholder(g, "p0", GR_F32, (gr_shape){1, {4}});
  gr_output q = gr_neg(g, gr_placeholder(g, "p1", GR_F32, (gr_shape){1, {4}}));
  gr_node *fwd[1] = {q.node};
  p0.node->control_inputs = fwd;
  p0.node->num_control_inputs = 1;
  GR_CHECK_OK(gr_placer_place(g, c, NULL, NULL, &err), err);
  GR_CHECK(p0.node->assigned_device != NULL);
  gr_node *back[1] = {d.node};
  b.node->control_inputs = back;
  b.node->num_control_inputs = 1;
  GR_CHECK(gr_placer_place(g, c, NULL, NULL, &err) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "cycle");
  b.node->num_control_inputs = 0;
  p0.node->num_control_inputs = 0;
  gr_graph_free(g);
  /* a graph with a build error */
  g = gr_graph_new();
  gr_matmul(g, gr_placeholder(g, "p", GR_F32, (gr_shape){2, {2, 3}}),
            gr_placeholder(g, "q", GR_F32, (gr_shape){2, {4, 5}}), false, false);
  GR_CHECK(gr_placer_place(g, c, NULL, NULL, &err) == GR_ERR_FAILED_PRECONDITION);
  gr_graph_free(g);
  gr_cluster_free(c);
}

static void test_cost_model(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){2, {-1, 784}});
  gr_output w = gr_placeholder(g, "w", GR_F32, (gr_shape){2, {784, 10}});
  gr_output y = gr_matmul(g, x, w, false, false);
  gr_output z = gr_add(g, y, y);
  gr_cost cm = gr_cost_of_node(y.node), ca = gr_cost_of_node(z.node);
  GR_CHECK_NEAR(cm.flops, 2.0 * GR_COST_DEFAULT_DIM * 784 * 10, 1e-6);
  GR_CHECK_NEAR(ca.flops, GR_COST_DEFAULT_DIM * 10.0, 1e-9);
  GR_CHECK_NEAR(gr_cost_output_bytes(x.node, 0), GR_COST_DEFAULT_DIM * 784.0 * 4, 1e-9);
  char key[256];
  gr_cost_profile_key(y.node, key, sizeof key);
  GR_CHECK(strcmp(key, "matmul(f32[?, 784],f32[784, 10])") == 0);
  gr_graph_free(g);
}

static void test_profiles(void) {
  char path[] = "/tmp/gr_test_profilesXXXXXX";
  int fd = mkstemp(path);
  GR_CHECK(fd >= 0);
  if (fd < 0) return;
  close(fd);
  gr_profile_db *db = NULL;
  gr_error err;
  GR_CHECK_OK(gr_profile_db_open(path, &db, &err), err);
  if (!db) return;
  GR_CHECK(gr_profile_db_record(db, "k", NAN, &err) == GR_ERR_INVALID_ARGUMENT);
  for (int i = 1; i <= 3; i++) GR_CHECK_OK(gr_profile_db_record(db, "k", i, &err), err);
  double mean;
  int64_t samples;
  GR_CHECK_OK(gr_profile_db_lookup(db, "k", &mean, &samples, &err), err);
  GR_CHECK_NEAR(mean, 2, 1e-12);
  GR_CHECK_EQ_INT(samples, 3);
  GR_CHECK_OK(gr_profile_db_lookup(db, "none", &mean, &samples, &err), err);
  GR_CHECK_EQ_INT(samples, 0);
  gr_profile_db_close(db);
  /* a later run reuses the measurements, and the placer uses them */
  GR_CHECK_OK(gr_profile_db_open(path, &db, &err), err);
  if (!db) return;
  GR_CHECK_OK(gr_profile_db_lookup(db, "k", &mean, &samples, &err), err);
  GR_CHECK_EQ_INT(samples, 3);
  gr_graph *g = gr_graph_new();
  gr_output y = gr_matmul(g, gr_placeholder(g, "x", GR_F32, (gr_shape){2, {8, 8}}),
                          gr_placeholder(g, "w", GR_F32, (gr_shape){2, {8, 8}}), false, false);
  char key[256];
  gr_cost_profile_key(y.node, key, sizeof key);
  for (int i = 0; i < 3; i++) GR_CHECK_OK(gr_profile_db_record(db, key, 7.0, &err), err);
  gr_cluster *c = cluster();
  gr_placer_options o = gr_placer_options_default();
  gr_placement *p = NULL;
  GR_CHECK_OK(gr_placer_place(g, c, &o, &p, &err), err);
  GR_CHECK(gr_placement_step_time(p) < 1e-3); /* static estimate: tiny */
  gr_placement_free(p);
  o.profiles = db;
  o.min_samples = 4; /* not enough samples yet */
  GR_CHECK_OK(gr_placer_place(g, c, &o, &p, &err), err);
  GR_CHECK(gr_placement_step_time(p) < 1e-3);
  gr_placement_free(p);
  o.min_samples = 3;
  GR_CHECK_OK(gr_placer_place(g, c, &o, &p, &err), err);
  GR_CHECK_NEAR(gr_placement_step_time(p), 7.0, 1e-9);
  gr_placement_free(p);
  gr_graph_free(g);
  gr_cluster_free(c);
  gr_profile_db_close(db);
  remove(path);
  /* an unusable path is an error naming it */
  GR_CHECK(gr_profile_db_open("/nonexistent/dir/p.db", &db, &err) == GR_ERR_IO);
  GR_CHECK_STR_CONTAINS(err.msg, "/nonexistent/dir/p.db");
}

/* Loops: the simulation sees one iteration, so the unpinned nodes of a loop
 * are placed together, while the same two heavy branches outside a loop go
 * to two devices; a pinned body node still goes where it is pinned. */
typedef struct heavy_arg {
  gr_output w;
  const char *pin; /* for the second branch, or NULL */
} heavy_arg;
static gr_output heavy_cond(gr_graph *g, void *p, const gr_output *v) {
  (void)p;
  return gr_less(g, v[0], gr_const_i64(g, 3));
}
static void heavy_pair(gr_graph *g, const heavy_arg *a, gr_output x, gr_output y, gr_output *ox,
                       gr_output *oy) {
  *ox = gr_tanh(g, gr_matmul(g, x, a->w, false, false));
  if (a->pin) gr_graph_push_device_scope(g, a->pin);
  *oy = gr_tanh(g, gr_matmul(g, y, a->w, false, false));
  if (a->pin) gr_graph_pop_device_scope(g);
}
static void heavy_body(gr_graph *g, void *p, const gr_output *v, gr_output *next) {
  next[0] = gr_add(g, v[0], gr_const_i64(g, 1));
  heavy_pair(g, p, v[1], v[2], &next[1], &next[2]);
}

static void test_loops_placed_together(void) {
  gr_cluster *c = gr_cluster_new_local(2, 1e9, 1e12, 1e-7);
  gr_error err;
  for (int variant = 0; variant < 3; variant++) { /* 0: no loop, 1: loop, 2: loop with a pin */
    gr_graph *g = gr_graph_new();
    gr_shape s = {2, {256, 256}};
    heavy_arg a = {gr_random_uniform(g, GR_F32, s, -0.1, 0.1, 1),
                   variant == 2 ? "/device:CPU:1" : NULL};
    gr_output v[3] = {gr_const_i64(g, 0), gr_random_uniform(g, GR_F32, s, -1, 1, 2),
                      gr_random_uniform(g, GR_F32, s, -1, 1, 3)};
    if (variant == 0)
      heavy_pair(g, &a, v[1], v[2], &v[1], &v[2]);
    else
      GR_CHECK(gr_while_loop(g, heavy_cond, heavy_body, &a, 3, v, 0) == GR_OK);
    GR_CHECK_OK(gr_placer_place(g, c, NULL, NULL, &err), err);
    const char *loop_dev = NULL;
    int devs_used = 0, pinned_seen = 0;
    const char *seen[2] = {NULL, NULL};
    for (int i = 0; i < gr_graph_num_nodes(g); i++) {
      const gr_node *n = gr_graph_node(g, i);
      if (strncmp(n->name, "while/", 6) != 0 && strncmp(n->name, "matmul", 6) != 0) continue;
      if (n->requested_device[0]) {
        GR_CHECK_STR_CONTAINS(n->assigned_device, "CPU:1");
        pinned_seen++;
        continue;
      }
      if (variant > 0) {
        if (!loop_dev) loop_dev = n->assigned_device;
        GR_CHECK_MSG(strcmp(n->assigned_device, loop_dev) == 0, "loop node %s on %s, not %s",
                     n->name, n->assigned_device, loop_dev);
      } else {
        for (int k = 0; k < 2; k++)
          if (!seen[k] || strcmp(seen[k], n->assigned_device) == 0) {
            if (!seen[k]) seen[k] = n->assigned_device, devs_used++;
            break;
          }
      }
    }
    if (variant == 0) GR_CHECK_EQ_INT(devs_used, 2); /* outside a loop they go apart */
    if (variant == 2) GR_CHECK_EQ_INT(pinned_seen, 2);
    gr_graph_free(g);
  }
  gr_cluster_free(c);
}

/* An RNN-like grid of adds (8 layers x 64 steps, each cell adds the same
 * layer's previous step and the previous layer's output; fed initial states
 * and inputs) on 4 devices whose
 * links move a tensor in about the time an add takes: the locality
 * placement (one block of layers per device) beats node-by-node earliest
 * finish, and the explanation says so for the nodes it placed. */
static void test_locality_explained(void) {
  gr_graph *g = gr_graph_new();
  gr_shape s = {2, {128, 128}};
  gr_output prev[8];
  for (int l = 0; l < 8; l++) prev[l] = gr_placeholder(g, NULL, GR_F32, s);
  for (int t = 0; t < 64; t++) {
    gr_output below = gr_placeholder(g, NULL, GR_F32, s);
    for (int l = 0; l < 8; l++) below = prev[l] = gr_add(g, prev[l], below);
  }
  GR_CHECK(!gr_graph_error(g));
  gr_cluster *c = gr_cluster_new_local(4, 1e9, 1e15, 0);
  for (int k = 0; k < GR_LINK_COUNT; k++)
    gr_cluster_set_link(c, k, (gr_link){.latency = 1e-6, .bandwidth = 4e9});
  gr_placer_options o = gr_placer_options_default();
  o.explain = true;
  gr_placement *p = NULL;
  gr_error err;
  GR_CHECK_OK(gr_placer_place(g, c, &o, &p, &err), err);
  char *text = explain_text(p);
  GR_CHECK_STR_CONTAINS(text, "with most of its inputs: the locality placement was faster");
  GR_CHECK_STR_CONTAINS(text, "-- locality");
  free(text);
  gr_placement_free(p);
  gr_cluster_free(c);
  gr_graph_free(g);
}

/* The placement step by mode: pins leave unpinned nodes alone, round-robin
 * cycles over the devices, cost places every node; pins stay pins. */
static void test_assign_modes(void) {
  gr_place_mode m;
  GR_CHECK(gr_place_mode_parse("round-robin", &m) && m == GR_PLACE_ROUND_ROBIN);
  GR_CHECK(gr_place_mode_parse("cost", &m) && m == GR_PLACE_COST);
  GR_CHECK(!gr_place_mode_parse("Cost", &m) && !gr_place_mode_parse(NULL, &m));
  for (int mode = 0; mode < 3; mode++) {
    gr_graph *g = gr_graph_new();
    gr_output x = gr_const_f32(g, 1);
    for (int i = 0; i < 6; i++) x = gr_add(g, x, gr_const_f32(g, (float)i));
    gr_graph_push_device_scope(g, "/job:localhost/replica:0/task:0/device:CPU:2");
    gr_output pinned = gr_neg(g, x);
    gr_graph_pop_device_scope(g);
    gr_error err;
    GR_CHECK_OK(gr_placer_assign(g, NULL, 3, (gr_place_mode)mode, false, &err), err);
    int placed = 0, on[3] = {0};
    for (int i = 0; i < gr_graph_num_nodes(g); i++) {
      gr_node *n = gr_graph_node(g, i);
      if (n == pinned.node) continue;
      if (!n->assigned_device) continue;
      placed++;
      for (int k = 0; k < 3; k++) {
        char want[GR_DEVICE_NAME_MAX];
        gr_device_spec d = gr_device_spec_local_cpu(k);
        on[k] += strcmp(n->assigned_device, gr_device_spec_str(&d, want)) == 0;
      }
    }
    int total = gr_graph_num_nodes(g) - 1;
    if (mode == GR_PLACE_PINS) GR_CHECK_EQ_INT(placed, 0);
    if (mode != GR_PLACE_PINS) GR_CHECK_EQ_INT(placed, total);
    if (mode == GR_PLACE_ROUND_ROBIN)
      GR_CHECK_MSG(on[0] >= total / 3 && on[1] >= total / 3 && on[2] >= total / 3,
                   "round-robin: %d %d %d of %d", on[0], on[1], on[2], total);
    if (mode == GR_PLACE_COST) GR_CHECK_STR_CONTAINS(pinned.node->assigned_device, "CPU:2");
    gr_graph_free(g);
  }
  gr_graph *g = gr_graph_new();
  gr_error err;
  GR_CHECK(gr_placer_assign(g, NULL, 0, GR_PLACE_COST, false, &err) == GR_ERR_INVALID_ARGUMENT);
  gr_graph_free(g);
}

/* The explanation ends with where each group (replica, stage, scope) went:
 * two replicas pinned to two devices, a variable on the ps. */
static void test_explain_groups(void) {
  gr_cluster *c = cluster();
  gr_graph *g = gr_graph_new();
  gr_graph_push_device_scope(g, "/job:ps");
  gr_output w = gr_variable(g, "layer/w", gr_zeros(g, GR_F32, (gr_shape){2, {4, 4}}));
  gr_graph_pop_device_scope(g);
  const char *pins[2] = {W01, W11};
  for (int r = 0; r < 2; r++) {
    char scope[16];
    snprintf(scope, sizeof scope, "replica_%d", r);
    gr_graph_push_name_scope(g, scope);
    gr_graph_push_device_scope(g, pins[r]);
    gr_relu(g, gr_matmul(g, gr_zeros(g, GR_F32, (gr_shape){2, {2, 4}}), w, false, false));
    gr_graph_pop_device_scope(g);
    gr_graph_pop_name_scope(g);
  }
  gr_error err;
  gr_placer_options o = gr_placer_options_default();
  o.explain = true;
  gr_placement *p = NULL;
  GR_CHECK_OK(gr_placer_place(g, c, &o, &p, &err), err);
  char *text = p ? explain_text(p) : NULL;
  const char *sum = text ? strstr(text, "# by group") : NULL;
  GR_CHECK_MSG(sum != NULL, "%s", text ? text : "");
  if (sum) {
    int d0 = gr_cluster_find_device(c, PS), d1 = gr_cluster_find_device(c, W01),
        d2 = gr_cluster_find_device(c, W11);
    char want[3][64];
    snprintf(want[0], sizeof want[0], "replica_0                d%d:", d1);
    snprintf(want[1], sizeof want[1], "replica_1                d%d:", d2);
    snprintf(want[2], sizeof want[2], "variables d%d:1", d0);
    for (int i = 0; i < 3; i++) GR_CHECK_STR_CONTAINS(sum, want[i]);
  }
  free(text);
  gr_placement_free(p);
  gr_graph_free(g);
  gr_cluster_free(c);
}

int main(void) {
  GR_RUN(test_assign_modes);
  GR_RUN(test_explain_groups);
  GR_RUN(test_pins_exact);
  GR_RUN(test_locality_explained);
  GR_RUN(test_unsatisfiable_pin);
  GR_RUN(test_resource_user_follows);
  GR_RUN(test_conflict);
  GR_RUN(test_malformed_pin);
  GR_RUN(test_colocate_with_and_explain);
  GR_RUN(test_refusals);
  GR_RUN(test_cost_model);
  GR_RUN(test_profiles);
  GR_RUN(test_loops_placed_together);
  return gr_test_finish();
}
