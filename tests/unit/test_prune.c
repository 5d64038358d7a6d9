/* The pruning walk (gr_graph_mark_needed) that the session and the graph
 * passes share: each option on a small hand-built graph, with exact marks
 * and parents. */
#include <graphrun.h>

#include "gr_test.h"

#define MAXN 64

typedef struct marks {
  unsigned char m[MAXN];
  int parent[MAXN];
} marks;

/* Runs the walk; the marks by node id, parents -2 where not set. */
static marks mark(const gr_graph *g, const gr_prune_request *r) {
  marks k;
  gr_error err;
  for (int i = 0; i < MAXN; i++) k.parent[i] = -2;
  GR_CHECK(gr_graph_num_nodes(g) <= MAXN);
  GR_CHECK_OK(gr_graph_mark_needed(g, r, k.m, k.parent, &err), err);
  return k;
}

/* A graph with a placeholder x (f32[4]) and a = neg(x). */
static gr_graph *graph_x_a(gr_output *x, gr_output *a) {
  gr_graph *g = gr_graph_new();
  *x = gr_placeholder(g, "x", GR_F32, (gr_shape){1, {4}});
  *a = gr_name(g, gr_neg(g, *x), "a");
  return g;
}

/* x (placeholder) -> a -> b, and an unrelated c; fetch b. */
static void test_fetch_walks_inputs_and_stops_at_feeds(void) {
  gr_output x, a;
  gr_graph *g = graph_x_a(&x, &a);
  gr_output b = gr_name(g, gr_neg(g, a), "b");
  gr_output c = gr_name(g, gr_neg(g, x), "c");
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_prune_request r = {.fetches = &b, .num_fetches = 1};
  marks k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[b.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.m[a.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.m[x.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.m[c.node->id], GR_PRUNE_UNUSED);
  GR_CHECK_EQ_INT(k.parent[b.node->id], -1);
  GR_CHECK_EQ_INT(k.parent[a.node->id], b.node->id);
  GR_CHECK_EQ_INT(k.parent[x.node->id], a.node->id);
  GR_CHECK_EQ_INT(k.parent[c.node->id], -2); /* unmarked: left as it was */
  /* feeding a cuts the walk there */
  r.feeds = &a;
  r.num_feeds = 1;
  k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[b.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.m[a.node->id], GR_PRUNE_UNUSED);
  GR_CHECK_EQ_INT(k.m[x.node->id], GR_PRUNE_UNUSED);
  /* a fed fetch needs nothing, unless its producer is kept: a
   * single-output node is stood in for, a placeholder stays whole */
  r.fetches = &a;
  k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[a.node->id], GR_PRUNE_UNUSED);
  r.keep_fed_producers = true;
  k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[a.node->id], GR_PRUNE_FED);
  GR_CHECK_EQ_INT(k.m[x.node->id], GR_PRUNE_UNUSED);
  r.feeds = &x;
  r.fetches = &b;
  k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[x.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.parent[x.node->id], a.node->id);
  /* no roots, no marks; every node a root with all_roots */
  gr_prune_request none = {0};
  k = mark(g, &none);
  for (int i = 0; i < gr_graph_num_nodes(g); i++) GR_CHECK_EQ_INT(k.m[i], GR_PRUNE_UNUSED);
  none.all_roots = true;
  k = mark(g, &none);
  for (int i = 0; i < gr_graph_num_nodes(g); i++) {
    GR_CHECK_EQ_INT(k.m[i], GR_PRUNE_NEEDED);
    GR_CHECK_EQ_INT(k.parent[i], -1);
  }
  gr_graph_free(g);
}

/* A control input on a fed node: satisfied by the feed (a step) or kept
 * (the passes). Targets are roots like fetches. */
static void test_control_inputs_and_feeds(void) {
  gr_output x, a;
  gr_graph *g = graph_x_a(&x, &a);
  gr_output d = gr_name(g, gr_neg(g, gr_const_f32(g, 1)), "d");
  GR_CHECK_OK(gr_graph_add_control_input(g, d.node, a.node), *gr_graph_error(g));
  gr_prune_request r = {.feeds = &a, .num_feeds = 1, .targets = &d, .num_targets = 1};
  marks k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[d.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.m[a.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.parent[a.node->id], d.node->id);
  GR_CHECK_EQ_INT(k.m[x.node->id], GR_PRUNE_NEEDED); /* kept whole: its inputs too */
  r.feeds_cut_control = true;
  k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[d.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.m[a.node->id], GR_PRUNE_UNUSED);
  /* unfed, the control input is walked either way */
  r.num_feeds = 0;
  k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[a.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.m[x.node->id], GR_PRUNE_NEEDED);
  gr_graph_free(g);
}

/* keep_variables: the variable a read names and its initialiser, walked
 * without feeds (FULL), even where the request feeds them. */
static void test_variables_and_initialisers(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){1, {4}});
  gr_output iv = gr_name(g, gr_neg(g, x), "iv");
  gr_output v = gr_variable(g, "v", iv);
  gr_output y = gr_name(g, gr_neg(g, v), "y");
  GR_CHECK(gr_graph_error(g) == NULL);
  const gr_node *init = gr_graph_find_node(g, "v/init");
  GR_CHECK(init != NULL);
  if (!init) {
    gr_graph_free(g);
    return;
  }
  gr_prune_request r = {.feeds = &iv, .num_feeds = 1, .fetches = &y, .num_fetches = 1};
  marks k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[y.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.m[v.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.m[init->id], GR_PRUNE_UNUSED);
  r.keep_variables = true;
  k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[v.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.m[init->id], GR_PRUNE_FULL);
  GR_CHECK_EQ_INT(k.parent[init->id], v.node->id);
  GR_CHECK_EQ_INT(k.m[iv.node->id], GR_PRUNE_FULL); /* fed, but not for the initialiser */
  GR_CHECK_EQ_INT(k.m[x.node->id], GR_PRUNE_FULL);
  /* a node needed by the request first and by an initialiser later rises */
  gr_output both[2] = {iv, y};
  r.num_feeds = 0;
  r.fetches = both;
  r.num_fetches = 2;
  k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[iv.node->id], GR_PRUNE_FULL);
  GR_CHECK_EQ_INT(k.parent[iv.node->id], -1);
  gr_graph_free(g);
}

/* keep_colocated, rep (CSE) and no_inputs (folded). */
static void test_colocation_rep_and_folded(void) {
  gr_output x, a;
  gr_graph *g = graph_x_a(&x, &a);
  gr_output a2 = gr_name(g, gr_neg(g, x), "a2");
  gr_output b = gr_name(g, gr_neg(g, a2), "b");
  gr_output t = gr_name(g, gr_neg(g, gr_const_f32(g, 1)), "t");
  GR_CHECK_OK(gr_graph_set_colocation(g, b.node, "t"), *gr_graph_error(g));
  gr_prune_request r = {.fetches = &b, .num_fetches = 1};
  marks k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[t.node->id], GR_PRUNE_UNUSED);
  GR_CHECK_EQ_INT(k.m[a2.node->id], GR_PRUNE_NEEDED);
  r.keep_colocated = true;
  int rep[MAXN];
  for (int i = 0; i < gr_graph_num_nodes(g); i++) rep[i] = i;
  rep[a2.node->id] = a.node->id; /* a2 merged into a */
  r.rep = rep;
  k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[t.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.parent[t.node->id], b.node->id);
  GR_CHECK_EQ_INT(k.m[a.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.m[a2.node->id], GR_PRUNE_UNUSED);
  GR_CHECK_EQ_INT(k.m[x.node->id], GR_PRUNE_NEEDED);
  unsigned char folded[MAXN] = {0};
  folded[a.node->id] = 1; /* a is a constant now */
  r.no_inputs = folded;
  k = mark(g, &r);
  GR_CHECK_EQ_INT(k.m[a.node->id], GR_PRUNE_NEEDED);
  GR_CHECK_EQ_INT(k.m[x.node->id], GR_PRUNE_UNUSED);
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_fetch_walks_inputs_and_stops_at_feeds);
  GR_RUN(test_control_inputs_and_feeds);
  GR_RUN(test_variables_and_initialisers);
  GR_RUN(test_colocation_rep_and_folded);
  return gr_test_finish();
}
