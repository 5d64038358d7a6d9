/* Placing a program for the step it runs (docs/placement.md): the step's
 * nodes predicted, the rest (an evaluation, initialisers) placed with their
 * inputs and groups at no cost; the layers of the round-robin candidate;
 * kernel times per node kept in the profile database (a loop's iterations
 * counted), per graph fingerprint; candidates written to the graph; the
 * servers' time scale fitted to a measured step. Deterministic inputs. */
#include <graphrun.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gr_test.h"
#include "placer/gr_placer.h"

static const char *program =
    "scope \"layer1\" { w1 = variable(zeros([8, 4])) }\n"
    "scope \"layer2\" { w2 = variable(zeros([4, 2])) }\n"
    "x = random_uniform([16, 8], seed=1)\n"
    "h = x @ w1\n"
    "y = h @ w2\n"
    "loss = reduce_mean(square(y))\n"
    "train = minimize(loss, sgd(0.1))\n"
    "big = reduce_sum(random_uniform([64, 64], seed=2) @ random_uniform([64, 64], seed=3))\n";

typedef struct prog {
  gr_graph *g;
  gr_dsl_program *p;
  gr_output loss, train, big, h, y, w1, w2;
} prog;

static prog load(const char *text) {
  prog r = {.g = gr_graph_new()};
  gr_error err;
  GR_CHECK_OK(gr_dsl_load_string("t.gr", text, r.g, NULL, &r.p, &err), err);
  GR_CHECK(gr_dsl_lookup(r.p, "loss", &r.loss) && gr_dsl_lookup(r.p, "train", &r.train));
  gr_dsl_lookup(r.p, "big", &r.big);
  gr_dsl_lookup(r.p, "h", &r.h);
  gr_dsl_lookup(r.p, "y", &r.y);
  gr_dsl_lookup(r.p, "w1", &r.w1);
  gr_dsl_lookup(r.p, "w2", &r.w2);
  return r;
}

static void unload(prog *r) {
  gr_dsl_program_free(r->p);
  gr_graph_free(r->g);
}

/* Three tasks (one device each, 1 Gflop/s) on one host, like graphrun launch's. */
static gr_cluster *three_tasks(bool addresses) {
  gr_cluster *c = gr_cluster_new();
  gr_error err;
  static const char *const jobs[] = {"ps", "worker", "worker"};
  for (int k = 0; k < 3; k++) {
    int t;
    GR_CHECK_OK(gr_cluster_add_task(c, jobs[k], "127.0.0.1", &t, &err), err);
    char a[32];
    snprintf(a, sizeof a, "127.0.0.1:%d", 3000 + k);
    if (addresses) GR_CHECK_OK(gr_cluster_set_task_address(c, t, a, &err), err);
    GR_CHECK_OK(gr_cluster_add_device(c, t, 1e9, 1e10, 1e-6, &err), err);
  }
  return c;
}

static gr_placer_options step_options(const prog *r, gr_profile_db *db) {
  gr_placer_options o = gr_placer_options_default();
  o.fetches = &r->loss, o.num_fetches = 1;
  o.targets = &r->train, o.num_targets = 1;
  o.profiles = db;
  o.min_samples = 1;
  return o;
}

/* The evaluation is placed but its 100 s do not count: they are not in the step. */
static void test_step_only(void) {
  prog r = load(program);
  gr_cluster *c = three_tasks(false);
  gr_profile_db *db;
  gr_error err;
  GR_CHECK_OK(gr_profile_db_open(":memory:", &db, &err), err);
  char key[600];
  const gr_node *mm = r.big.node->inputs[0].node; /* the evaluation's product */
  gr_cost_node_key(gr_cost_graph_fingerprint(r.g), mm, false, key, sizeof key);
  GR_CHECK_OK(gr_profile_db_record(db, key, 100, &err), err);
  gr_placer_options o = step_options(&r, db);
  o.explain = true;
  gr_placement *p = NULL;
  GR_CHECK_OK(gr_placer_place(r.g, c, &o, &p, &err), err);
  GR_CHECK(gr_placement_step_time(p) < 1);
  for (int i = 0; i < gr_graph_num_nodes(r.g); i++)
    GR_CHECK(gr_graph_node(r.g, i)->assigned_device != NULL);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  gr_placement_explain(p, f);
  fclose(f);
  GR_CHECK_STR_CONTAINS(text, "not in the step");
  GR_CHECK_STR_CONTAINS(text, "# candidates (predicted step): cost");
  free(text);
  gr_placement_free(p);
  /* without a step every node is in it */
  o.num_fetches = o.num_targets = 0;
  GR_CHECK_OK(gr_placer_place(r.g, c, &o, &p, &err), err);
  GR_CHECK(gr_placement_step_time(p) >= 100);
  gr_placement_free(p);
  gr_profile_db_close(db);
  gr_cluster_free(c);
  unload(&r);
}

/* Layers are named after the variables a node uses: x @ w1 goes with layer1,
 * h @ w2 with layer2 although h comes from layer1; round robin puts them on
 * the session order's devices; every candidate keeps a variable with its
 * update; apply writes a candidate's devices. */
static void test_layers_and_apply(void) {
  prog r = load(program);
  gr_cluster *c = three_tasks(false);
  gr_error err;
  gr_placer_options o = step_options(&r, NULL);
  gr_placement *p = NULL;
  GR_CHECK_OK(gr_placer_place(r.g, c, &o, &p, &err), err);
  gr_place_candidate L = GR_PLACE_CAND_LAYERS;
  int d1 = gr_placement_candidate_device(p, L, r.w1.node->id),
      d2 = gr_placement_candidate_device(p, L, r.w2.node->id);
  GR_CHECK(d1 >= 0 && d2 >= 0 && d1 != d2);
  GR_CHECK_EQ_INT(gr_placement_candidate_device(p, L, r.h.node->id), d1);
  GR_CHECK_EQ_INT(gr_placement_candidate_device(p, L, r.y.node->id), d2);
  /* the workers first in the session order: layer1 (the first) on worker 0 */
  GR_CHECK_EQ_INT(d1, 1);
  for (int k = 0; k < GR_PLACE_CAND_COUNT; k++)
    for (int i = 0; i < gr_graph_num_nodes(r.g); i++) {
      const gr_node *n = gr_graph_node(r.g, i);
      const char *var = gr_node_attr_string(n, "var", "");
      const gr_node *v = var[0] ? gr_graph_find_node(r.g, var) : NULL;
      if (v)
        GR_CHECK_EQ_INT(gr_placement_candidate_device(p, (gr_place_candidate)k, n->id),
                        gr_placement_candidate_device(p, (gr_place_candidate)k, v->id));
    }
  GR_CHECK_OK(gr_placement_apply(p, L, &err), err);
  GR_CHECK(strcmp(r.w2.node->assigned_device, gr_cluster_device_at(c, d2)->name) == 0);
  GR_CHECK_OK(gr_placement_apply(p, GR_PLACE_CAND_ONE_TASK, &err), err);
  for (int i = 1; i < gr_graph_num_nodes(r.g); i++)
    GR_CHECK(strcmp(gr_graph_node(r.g, i)->assigned_device,
                    gr_graph_node(r.g, 0)->assigned_device) == 0);
  gr_placement_free(p);
  gr_cluster_free(c);
  unload(&r);
}

/* Kernel times per node of a step, under the graph's fingerprint; a loop
 * body's node runs once per iteration, recorded as its runs. */
static void test_profile_step(void) {
  const char *loop = "t, s = while (t = const(0, i64), s = const(1.0); t < 5) {\n"
                     "  s = s * 1.5\n"
                     "  t = t + 1\n"
                     "}\n"
                     "out = s + 1\n";
  prog r = {.g = gr_graph_new()};
  gr_error err;
  GR_CHECK_OK(gr_dsl_load_string("loop.gr", loop, r.g, NULL, &r.p, &err), err);
  gr_output out;
  GR_CHECK(gr_dsl_lookup(r.p, "out", &out));
  uint64_t fp = gr_cost_graph_fingerprint(r.g);
  gr_profile_db *db;
  GR_CHECK_OK(gr_profile_db_open(":memory:", &db, &err), err);
  int nodes = 0;
  GR_CHECK_OK(gr_profile_db_record_step(db, r.g, NULL, 0, &out, 1, NULL, 0, 4, &nodes, &err), err);
  GR_CHECK(nodes > 5);
  char key[600];
  double mean;
  int64_t samples;
  gr_cost_node_key(fp, out.node, false, key, sizeof key);
  GR_CHECK_OK(gr_profile_db_lookup(db, key, &mean, &samples, &err), err);
  GR_CHECK(samples >= 1 && samples <= 4 && mean >= 0);
  gr_cost_node_key(fp, out.node, true, key, sizeof key); /* once per step: no runs recorded */
  GR_CHECK_OK(gr_profile_db_lookup(db, key, &mean, &samples, &err), err);
  GR_CHECK_EQ_INT(samples, 0);
  bool found = false; /* the body's product runs 5 times a step */
  for (int i = 0; i < gr_graph_num_nodes(r.g); i++) {
    const gr_node *n = gr_graph_node(r.g, i);
    if (strcmp(n->op->name, "mul") != 0) continue;
    gr_cost_node_key(fp, n, true, key, sizeof key);
    GR_CHECK_OK(gr_profile_db_lookup(db, key, &mean, &samples, &err), err);
    GR_CHECK(samples >= 1);
    GR_CHECK_NEAR(mean, 5, 0);
    found = true;
  }
  GR_CHECK(found);
  /* the same text loads to the same fingerprint; another text to another */
  prog again = {.g = gr_graph_new()};
  GR_CHECK_OK(gr_dsl_load_string("loop.gr", loop, again.g, NULL, &again.p, &err), err);
  GR_CHECK(gr_cost_graph_fingerprint(again.g) == fp);
  unload(&again);
  prog other = load(program);
  GR_CHECK(gr_cost_graph_fingerprint(other.g) != fp);
  unload(&other);
  gr_profile_db_close(db);
  unload(&r);
}

/* The servers' time scale fitted to a measured pins-only step: (measured -
 * step costs) / (predicted - step costs). */
static void test_fit_scale(void) {
  prog r = load(program);
  gr_cluster *c = three_tasks(true);
  gr_cluster_set_link(c, GR_LINK_SAME_TASK,
                      (gr_link){.latency = 1e-6, .bandwidth = 1e9, .step = 1e-3});
  gr_cluster_set_link(c, GR_LINK_SAME_HOST,
                      (gr_link){.latency = 1e-5, .bandwidth = 1e9, .step = 2e-3});
  gr_error err;
  gr_placer_options o = step_options(&r, NULL);
  gr_placement *p = NULL;
  GR_CHECK_OK(gr_placer_place(r.g, c, &o, &p, &err), err);
  double pred = gr_placement_candidate_time(p, GR_PLACE_CAND_PINS);
  double costs = gr_placement_step_costs(p, GR_PLACE_CAND_PINS);
  GR_CHECK_NEAR(costs, 1e-3 + 2e-3, 1e-15); /* the client, and one server task */
  GR_CHECK(pred > costs);
  double f;
  GR_CHECK_OK(gr_placement_fit_scale(p, c, costs + 3 * (pred - costs), &f, &err), err);
  GR_CHECK_NEAR(f, 3, 1e-9);
  for (int d = 0; d < 3; d++) GR_CHECK_NEAR(gr_cluster_device_at(c, d)->time_scale, 3, 1e-9);
  gr_placement_free(p);
  /* placed again, the pins-only step is predicted as measured */
  GR_CHECK_OK(gr_placer_place(r.g, c, &o, &p, &err), err);
  GR_CHECK_NEAR(gr_placement_candidate_time(p, GR_PLACE_CAND_PINS), costs + 3 * (pred - costs),
                1e-9);
  gr_placement_free(p);
  gr_cluster_free(c);
  unload(&r);
}

int main(void) {
  GR_RUN(test_step_only);
  GR_RUN(test_layers_and_apply);
  GR_RUN(test_profile_step);
  GR_RUN(test_fit_scale);
  return gr_test_finish();
}
