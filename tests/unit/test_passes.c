/* Graph passes (placer/passes.c): pruning, CSE and constant folding on
 * hand-built graphs with exact node counts, a property test on random DAGs
 * (the optimised graph computes bit-identical results; stateful nodes are
 * never merged), and every examples/NAME.gr file giving identical fetches. */
#include <dirent.h>
#include <graphrun.h>
#include <stdlib.h>
#include <string.h>

#include "gr_test.h"
#include "example_runner.h"
#include "test_util.h"

static gr_passes_options only(bool prune, bool cse, bool fold) {
  gr_passes_options o = gr_passes_options_default();
  o.no_prune = !prune;
  o.no_cse = !cse;
  o.no_fold = !fold;
  o.no_fuse = true; /* the fusion pass has its own tests (test_fusion.c) */
  return o;
}

/* Runs the passes; NULL (and a failed check) on error. */
static gr_graph *optimize(gr_graph *g, const gr_output *feeds, int nf, const gr_output *fetches,
                          int nx, const gr_output *targets, int nt, const gr_passes_options *o,
                          gr_passes_stats *st) {
  gr_graph *out = NULL;
  gr_error err;
  GR_CHECK_OK(gr_passes_optimize_graph(g, feeds, nf, fetches, nx, targets, nt, o, &out, st, &err),
              err);
  if (out) {
    GR_CHECK_EQ_INT(st->nodes_out, gr_graph_num_nodes(out));
    GR_CHECK_EQ_INT(st->nodes_in, gr_graph_num_nodes(g));
    GR_CHECK_EQ_INT(st->nodes_out, st->nodes_in - st->nodes_pruned - st->nodes_merged -
                                       st->nodes_unused_after_folding - st->nodes_fused);
  }
  return out;
}

static int count_op(const gr_graph *g, const char *op) {
  int k = 0;
  for (int i = 0; i < gr_graph_num_nodes(g); i++)
    k += strcmp(gr_graph_node(g, i)->op->name, op) == 0;
  return k;
}

static const char *op_of(const gr_graph *g, const char *name) {
  const gr_node *n = gr_graph_find_node(g, name);
  return n ? n->op->name : "(missing)";
}

/* Runs one step of g fetching one value (names of feeds and fetch looked up
 * in g); returns the status, *out the value. */
static gr_status run1(gr_graph *g, const gr_feed *feeds, int nf, gr_output fetch, gr_tensor *out,
                      gr_error *err) {
  gr_session_options so = {.inter_op_threads = 1};
  gr_session *s = gr_session_new(g, &so, err);
  if (!s) return err->code;
  gr_feed f[8];
  for (int i = 0; i < nf; i++) f[i] = (gr_feed){gt_same_in(g, feeds[i].output), feeds[i].value};
  gr_output x = gt_same_in(g, fetch);
  gr_status st = gr_session_run(s, f, nf, &x, 1, out, NULL, 0, err);
  gr_session_free(s);
  return st;
}

/* The passes' graph computes the same bits as g. */
static void check_same_result(gr_graph *g, gr_graph *opt, const gr_feed *feeds, int nf,
                              gr_output fetch) {
  gr_tensor a = gr_tensor_empty(), b = gr_tensor_empty();
  gr_error err;
  gr_status sa = run1(g, feeds, nf, fetch, &a, &err);
  GR_CHECK_OK(sa, err);
  gr_status sb = run1(opt, feeds, nf, fetch, &b, &err);
  GR_CHECK_OK(sb, err);
  GR_CHECK(sa != GR_OK || sb != GR_OK || gt_same_bits(&a, &b));
  gr_tensor_release(&a);
  gr_tensor_release(&b);
}

/* The same, fed two f32[4] placeholders x and y with these values. */
static void check_same_result_xy(gr_graph *g, gr_graph *opt, gr_output x, const double *xs,
                                 gr_output y, const double *ys, gr_output fetch) {
  gr_tensor xv = gt_make(GR_F32, (gr_shape){1, {4}}, xs);
  gr_tensor yv = gt_make(GR_F32, (gr_shape){1, {4}}, ys);
  gr_feed f[2] = {{x, &xv}, {y, &yv}};
  check_same_result(g, opt, f, 2, fetch);
  gr_tensor_release(&xv);
  gr_tensor_release(&yv);
}

/* ---- pruning ------------------------------------------------------------------- */

static void test_prune(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output a = gr_add(g, x, gr_const_f32(g, 1));
  gr_output b = gr_mul(g, a, gr_const_f32(g, 2));
  gr_output u = gr_mul(g, x, gr_const_f32(g, 3));
  gr_sub(g, x, gr_const_f32(g, 4)); /* needed by nothing */
  gr_graph_push_control_deps(g, &u, 1);
  gr_output d = gr_identity(g, b);
  gr_graph_pop_control_deps(g);
  GR_CHECK_EQ_INT(gr_graph_num_nodes(g), 10);
  gr_passes_options o = only(true, false, false);
  gr_passes_stats st;

  gr_graph *p = optimize(g, NULL, 0, &b, 1, NULL, 0, &o, &st); /* x, 1, add, 2, mul */
  GR_CHECK_EQ_INT(st.nodes_pruned, 5);
  GR_CHECK_EQ_INT(st.nodes_out, 5);
  GR_CHECK(gr_graph_find_node(p, u.node->name) == NULL);
  gr_graph_free(p);

  /* control inputs are followed: d also needs u and its constant */
  p = optimize(g, NULL, 0, &d, 1, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_out, 8);
  GR_CHECK(gr_graph_find_node(p, u.node->name) != NULL);
  GR_CHECK_EQ_INT(gr_graph_find_node(p, d.node->name)->num_control_inputs, 1);
  gr_graph_free(p);
  p = optimize(g, NULL, 0, NULL, 0, &d, 1, &o, &st); /* the same as a target */
  GR_CHECK_EQ_INT(st.nodes_out, 8);
  gr_graph_free(p);

  /* a fed endpoint cuts the walk: `add` becomes a placeholder, x and 1 go */
  p = optimize(g, &a, 1, &b, 1, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_out, 3);
  GR_CHECK(strcmp(op_of(p, a.node->name), "placeholder") == 0);
  GR_CHECK(gr_graph_find_node(p, "x") == NULL);
  gr_tensor five = gr_tensor_scalar_f32(5);
  gr_feed fa = {a, &five};
  check_same_result(g, p, &fa, 1, b);
  gr_graph_free(p);
  gr_tensor_release(&five);

  /* nothing requested, or no_prune: everything stays */
  p = optimize(g, NULL, 0, NULL, 0, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_out, 10);
  gr_graph_free(p);
  gr_passes_options all = only(false, false, false);
  p = optimize(g, NULL, 0, &b, 1, NULL, 0, &all, &st);
  GR_CHECK_EQ_INT(st.nodes_pruned, 0);
  GR_CHECK_EQ_INT(st.nodes_out, 10);
  gr_graph_free(p);
  GR_CHECK_EQ_INT(gr_graph_num_nodes(g), 10); /* the input graph is unchanged */
  gr_graph_free(g);
}

static void test_prune_keeps_variables_and_colocation(void) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_seed(g, 42);
  gr_output v = gr_variable(g, "v", gr_const_f32(g, 4)); /* const, v/init, v */
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output r = gr_add(g, v, x);
  gr_output s = gr_mul(g, x, x);
  gr_output y = gr_identity(g, x);
  gr_error err;
  GR_CHECK_OK(gr_graph_set_colocation(g, y.node, s.node->name), err);
  GR_CHECK_EQ_INT(gr_graph_num_nodes(g), 7);
  gr_passes_options o = only(true, true, true);
  gr_passes_stats st;
  /* r needs v, x and v's initialiser with its input; the square is not needed */
  gr_graph *p = optimize(g, NULL, 0, &r, 1, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_out, 5);
  GR_CHECK(gr_graph_find_node(p, "v/init") != NULL);
  GR_CHECK(gr_graph_seed(p) == 42);
  gr_tensor one = gr_tensor_scalar_f32(1);
  gr_feed fx = {x, &one};
  check_same_result(g, p, &fx, 1, r); /* the session initialises v in the new graph */
  gr_graph_free(p);
  /* y is colocated with the square, which must exist for the placer */
  p = optimize(g, NULL, 0, &y, 1, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_out, 3);
  GR_CHECK(strcmp(op_of(p, s.node->name), "mul") == 0);
  GR_CHECK(strcmp(gr_graph_find_node(p, y.node->name)->colocate_with, s.node->name) == 0);
  gr_graph_free(p);
  gr_tensor_release(&one);
  gr_graph_free(g);
}

/* ---- CSE ------------------------------------------------------------------------ */

static void test_cse_merges_equal_nodes(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){1, {4}});
  gr_output y = gr_placeholder(g, "y", GR_F32, (gr_shape){1, {4}});
  gr_output a1 = gr_add(g, x, y), a2 = gr_add(g, x, y);
  gr_output b1 = gr_mul(g, a1, a1), b2 = gr_mul(g, a2, a2); /* equal once a2 is a1 */
  gr_output s = gr_sub(g, b1, b2);
  GR_CHECK_EQ_INT(gr_graph_num_nodes(g), 7);
  gr_passes_options o = only(true, true, false);
  gr_passes_stats st;
  gr_graph *p = optimize(g, NULL, 0, &s, 1, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_merged, 2);
  GR_CHECK_EQ_INT(st.nodes_out, 5);
  const gr_node *ps = gr_graph_find_node(p, s.node->name);
  GR_CHECK(ps && ps->inputs[0].node == ps->inputs[1].node);
  check_same_result_xy(g, p, x, (double[]){1, 2, 3, 4}, y, (double[]){0.5, -1, 7, 9}, s);
  gr_graph_free(p);
  /* fetched nodes keep their names: a1 and a2 are both fetched, so neither goes */
  p = optimize(g, NULL, 0, (gr_output[]){a1, a2}, 2, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_merged, 0);
  GR_CHECK_EQ_INT(st.nodes_out, 4);
  gr_graph_free(p);
  /* a fed node is never merged nor merged into */
  p = optimize(g, &a2, 1, &s, 1, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_merged, 0);
  gr_graph_free(p);
  gr_graph_free(g);
}

static void test_cse_is_conservative(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){1, {4}});
  gr_output y = gr_placeholder(g, "y", GR_F32, (gr_shape){1, {4}});
  gr_output k1 = gr_reduce_sum(g, x, (int64_t[]){0}, 1, false);
  gr_output k2 = gr_reduce_sum(g, x, (int64_t[]){0}, 1, false); /* merged into k1 */
  gr_output k3 = gr_reduce_sum(g, x, (int64_t[]){0}, 1, true);  /* other attr */
  gr_graph_push_control_deps(g, &k3, 1);
  gr_output i1 = gr_identity(g, x);
  gr_output i2 = gr_identity(g, x); /* merged into i1 */
  gr_graph_pop_control_deps(g);
  gr_output i3 = gr_identity(g, x); /* no control input */
  gr_output p1 = gr_add(g, x, y);
  gr_graph_push_device_scope(g, "/job:localhost/replica:0/task:0/device:CPU:0");
  gr_output p2 = gr_add(g, x, y); /* another requested device */
  gr_graph_pop_device_scope(g);
  gr_output r1 = gr_random_uniform(g, GR_F32, (gr_shape){1, {4}}, 0, 1, 5);
  gr_output r2 = gr_random_uniform(g, GR_F32, (gr_shape){1, {4}}, 0, 1, 5); /* stateful */
  gr_output z0 = gr_const_f32(g, 0.0f), zn = gr_const_f32(g, -0.0f);        /* other bits */
  gr_output c1 = gr_const_f32(g, 2.5f), c2 = gr_const_f32(g, 2.5f);         /* merged */
  gr_output parts[] = {k2, k3, i1, i2, i3, p1, p2, r1, r2, z0, zn, c1, c2};
  gr_output t = k1;
  for (int i = 0; i < 13; i++) t = gr_add(g, t, parts[i]);
  GR_CHECK(gr_graph_error(g) == NULL);
  GR_CHECK_EQ_INT(gr_graph_num_nodes(g), 29); /* 2 + 3 + 3 + 2 + 2 + 4 + 13 adds */
  gr_passes_options o = only(true, true, false);
  gr_passes_stats st;
  gr_graph *p = optimize(g, NULL, 0, &t, 1, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_merged, 3); /* k2, i2, c2 */
  GR_CHECK_EQ_INT(st.nodes_out, 26);
  GR_CHECK_EQ_INT(count_op(p, "random_uniform"), 2);
  GR_CHECK_EQ_INT(count_op(p, "reduce_sum"), 2);
  GR_CHECK_EQ_INT(count_op(p, "identity"), 2);
  GR_CHECK_EQ_INT(count_op(p, "const"), 3);
  GR_CHECK(gr_graph_find_node(p, r2.node->name) != NULL);
  check_same_result_xy(g, p, x, (double[]){1, 2, 3, 4}, y, (double[]){-2, 0, 5, 1}, t);
  gr_graph_free(p);
  gr_graph_free(g);
}

/* ---- constant folding ----------------------------------------------------------- */

static void test_fold(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output c2 = gr_const_f32(g, 2);
  gr_output s = gr_add(g, c2, gr_const_f32(g, 3));
  gr_output p = gr_mul(g, s, c2);
  gr_output q = gr_add(g, p, x);
  GR_CHECK_EQ_INT(gr_graph_num_nodes(g), 6);
  gr_passes_options o = only(true, true, true);
  gr_passes_stats st;
  gr_graph *opt = optimize(g, NULL, 0, &q, 1, NULL, 0, &o, &st);
  /* s and p are evaluated; p stays as a const, s and both constants go */
  GR_CHECK_EQ_INT(st.nodes_folded, 2);
  GR_CHECK_EQ_INT(st.nodes_unused_after_folding, 3);
  GR_CHECK_EQ_INT(st.nodes_out, 3);
  const gr_node *pc = gr_graph_find_node(opt, p.node->name);
  GR_CHECK(pc && strcmp(pc->op->name, "const") == 0 && pc->num_inputs == 0);
  if (pc) GR_CHECK_NEAR(gr_tensor_get_f64(&gr_node_attr(pc, "value")->tensor, 0), 10, 0);
  gr_tensor one = gr_tensor_scalar_f32(1);
  gr_feed fx = {x, &one};
  check_same_result(g, opt, &fx, 1, q);
  gr_graph_free(opt);
  /* a fetched folded node stays (as a const of its name) */
  opt = optimize(g, NULL, 0, (gr_output[]){q, s}, 2, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_folded, 2);
  GR_CHECK_EQ_INT(st.nodes_out, 4);
  GR_CHECK(strcmp(op_of(opt, s.node->name), "const") == 0);
  gr_graph_free(opt);
  /* fetched-as-fed: s is fed, so neither s nor p is folded; s stands in as a placeholder */
  opt = optimize(g, &s, 1, (gr_output[]){q, s}, 2, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_folded, 0);
  GR_CHECK_EQ_INT(st.nodes_out, 5); /* s, 2, mul, add, x */
  GR_CHECK(strcmp(op_of(opt, s.node->name), "placeholder") == 0);
  gr_tensor seven = gr_tensor_scalar_f32(7);
  gr_feed f2[2] = {{x, &one}, {s, &seven}};
  check_same_result(g, opt, f2, 2, q);
  gr_graph_free(opt);
  gr_tensor_release(&seven);
  gr_tensor_release(&one);
  gr_graph_free(g);
}

static void test_fold_size_cap(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, gr_shape_scalar());
  gr_output z = gr_fill(g, GR_F32, (gr_shape){2, {600, 600}}, 0.25); /* 1,440,000 bytes */
  gr_output w = gr_add(g, z, gr_const_f32(g, 1));
  gr_output r = gr_reduce_sum(g, w, NULL, 0, false);
  gr_output out = gr_mul(g, r, x);
  int n = gr_graph_num_nodes(g);
  GR_CHECK_EQ_INT(n, 6);
  gr_passes_options o = gr_passes_options_default();
  gr_passes_stats st;
  gr_graph *opt = optimize(g, NULL, 0, &out, 1, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_folded, 0); /* the fill is over 1 MiB, so all above it stays */
  GR_CHECK_EQ_INT(st.nodes_out, 6);
  gr_graph_free(opt);
  o.fold_max_bytes = 2u << 20;
  opt = optimize(g, NULL, 0, &out, 1, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_folded, 3); /* fill, add, reduce_sum */
  GR_CHECK_EQ_INT(st.nodes_unused_after_folding, 3);
  GR_CHECK_EQ_INT(st.nodes_out, 3);
  GR_CHECK(strcmp(op_of(opt, r.node->name), "const") == 0);
  gr_tensor three = gr_tensor_scalar_f32(3);
  gr_feed fx = {x, &three};
  check_same_result(g, opt, &fx, 1, out);
  gr_graph_free(opt);
  gr_tensor_release(&three);
  gr_graph_free(g);
}

static void test_fold_leaves_random_and_failing_nodes(void) {
  gr_graph *g = gr_graph_new();
  gr_output u = gr_random_uniform(g, GR_F32, (gr_shape){1, {4}}, 0, 1, 3);
  gr_output v = gr_mul(g, u, gr_const_f32(g, 2));
  gr_output bad = gr_div(g, gr_const_i32(g, 1), gr_const_i32(g, 0));
  gr_passes_options o = gr_passes_options_default();
  gr_passes_stats st;
  gr_graph *opt = optimize(g, NULL, 0, &v, 1, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_folded, 0);
  GR_CHECK_EQ_INT(st.nodes_out, 3);
  check_same_result(g, opt, NULL, 0, v);
  gr_graph_free(opt);
  /* integer division by zero: left to fail at run time, as it would */
  opt = optimize(g, NULL, 0, &bad, 1, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_folded, 0);
  GR_CHECK(strcmp(op_of(opt, bad.node->name), "div") == 0);
  gr_tensor t = gr_tensor_empty();
  gr_error err;
  GR_CHECK(run1(opt, NULL, 0, bad, &t, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "division by zero");
  gr_graph_free(opt);
  gr_graph_free(g);
}

static gr_output loop_cond(gr_graph *g, void *arg, const gr_output *v) {
  return gr_less(g, v[0], gr_const_f32(g, 10));
}
static void loop_body(gr_graph *g, void *arg, const gr_output *v, gr_output *next) {
  gr_output step = gr_mul(g, gr_const_f32(g, 0.5f), gr_const_f32(g, 3)); /* in the frame */
  *(gr_output *)arg = step;
  next[0] = gr_add(g, v[0], step);
}

static void test_fold_not_inside_loops(void) {
  gr_graph *g = gr_graph_new();
  gr_output step = {NULL, 0};
  gr_output i = gr_add(g, gr_const_f32(g, 1), gr_const_f32(g, -1)); /* folded: outside */
  gr_error err;
  GR_CHECK_OK(gr_while_loop(g, loop_cond, loop_body, &step, 1, &i, 1), err);
  gr_output out = gr_mul(g, i, gr_const_f32(g, 2));
  gr_passes_options o = only(true, true, true);
  gr_passes_stats st;
  gr_graph *opt = optimize(g, NULL, 0, &out, 1, NULL, 0, &o, &st);
  GR_CHECK_EQ_INT(st.nodes_folded, 1);
  GR_CHECK(step.node && strcmp(op_of(opt, step.node->name), "mul") == 0);
  check_same_result(g, opt, NULL, 0, out);
  gr_graph_free(opt);
  gr_graph_free(g);
}

static void test_errors(void) {
  gr_graph *g = gr_graph_new(), *h = gr_graph_new();
  gr_output x = gr_const_f32(g, 1), y = gr_const_f32(h, 2);
  gr_graph *out = (gr_graph *)1;
  gr_error err;
  GR_CHECK(gr_passes_optimize_graph(g, NULL, 0, &y, 1, NULL, 0, NULL, &out, NULL, &err) ==
           GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(err.msg, "fetch 0 ('const') is not a node of the graph");
  GR_CHECK(out == NULL);
  GR_CHECK(gr_passes_optimize_graph(g, NULL, 0, &(gr_output){x.node, 3}, 1, NULL, 0, NULL, &out,
                                    NULL, &err) == GR_ERR_OUT_OF_RANGE);
  GR_CHECK_STR_CONTAINS(err.msg, "output 3 of 'const'");
  gr_add(g, x, gr_const_i32(g, 1)); /* a dtype error, recorded in g */
  GR_CHECK(gr_passes_optimize_graph(g, NULL, 0, &x, 1, NULL, 0, NULL, &out, NULL, &err) != GR_OK);
  GR_CHECK_STR_CONTAINS(err.msg, "build error");
  gr_graph_free(g);
  gr_graph_free(h);
}

/* ---- property: random DAGs of pure arithmetic ----------------------------------- */

#define DAG_MAX 48
#define NFETCH  4

typedef struct dag {
  gr_graph *g;
  int n;
  gr_output out[DAG_MAX];
  int op[DAG_MAX]; /* -1 placeholder, -2 const, -3 random, else an op index */
  int a[DAG_MAX], b[DAG_MAX];
} dag;

enum { OP_ADD, OP_SUB, OP_MUL, OP_MAX, OP_MIN, OP_NEG, OP_ABS, OP_SQUARE, OP_TANH, OP_SUM, OP_N };

static gr_output build_op(gr_graph *g, int op, gr_output a, gr_output b) {
  switch (op) {
    case OP_ADD:
      return gr_add(g, a, b);
    case OP_SUB:
      return gr_sub(g, a, b);
    case OP_MUL:
      return gr_mul(g, a, b);
    case OP_MAX:
      return gr_maximum(g, a, b);
    case OP_MIN:
      return gr_minimum(g, a, b);
    case OP_NEG:
      return gr_neg(g, a);
    case OP_ABS:
      return gr_abs(g, a);
    case OP_SQUARE:
      return gr_square(g, a);
    case OP_TANH:
      return gr_tanh(g, a);
    default:
      return gr_reduce_sum(g, a, NULL, 0, false);
  }
}

static void add_node(dag *d, int op, int a, int b, gr_output o) {
  d->op[d->n] = op;
  d->a[d->n] = a;
  d->b[d->n] = b;
  d->out[d->n++] = o;
}

/* Any earlier node, or one of the last few (so duplicates get consumers). */
static int pick_input(const dag *d, gt_rng *r) {
  return (int)gt_int(r, gt_int(r, 0, 1) && d->n > 4 ? d->n - 4 : 0, d->n - 1);
}

static void build_dag(dag *d, gt_rng *r) {
  d->g = gr_graph_new();
  d->n = 0;
  gr_graph_set_seed(d->g, gt_next(r));
  gr_shape v4 = {1, {4}};
  add_node(d, -1, -1, -1, gr_placeholder(d->g, "p0", GR_F32, v4));
  add_node(d, -1, -1, -1, gr_placeholder(d->g, "p1", GR_F32, v4));
  int n = (int)gt_int(r, 12, DAG_MAX);
  static const float vals[] = {0.5f, 1, 2, -1, 3};
  while (d->n < n) {
    double u = gt_uniform(r, 0, 1);
    if (u < 0.2) { /* constants with few distinct values: duplicates and constant subtrees */
      float v = vals[gt_int(r, 0, 4)];
      gr_output c = gt_int(r, 0, 1) ? gr_const_f32(d->g, v)
                                    : gr_const_data(d->g, GR_F32, v4, (float[]){v, v, -v, v});
      add_node(d, -2, -1, -1, c);
    } else if (u < 0.27) { /* random ops with equal attrs: never merged */
      add_node(d, -3, -1, -1, gr_random_uniform(d->g, GR_F32, v4, -1, 1, 9));
    } else if (u < 0.6 && d->n > 2) {                            /* a duplicated subexpression */
      int k = (int)gt_int(r, d->n > 8 ? d->n - 6 : 2, d->n - 1); /* a recent one */
      if (d->op[k] < 0) continue;
      add_node(
          d, d->op[k], d->a[k], d->b[k],
          build_op(d->g, d->op[k], d->out[d->a[k]], d->b[k] >= 0 ? d->out[d->b[k]] : d->out[0]));
    } else {
      int op = (int)gt_int(r, 0, OP_N - 1);
      int a = pick_input(d, r), b = op < OP_NEG ? pick_input(d, r) : -1;
      add_node(d, op, a, b, build_op(d->g, op, d->out[a], b >= 0 ? d->out[b] : d->out[0]));
    }
  }
}

/* Random nodes an endpoint depends on (count by DFS over the DAG). */
static void mark_random(const dag *d, int i, bool *seen, int *count) {
  if (i < 0 || seen[i]) return;
  seen[i] = true;
  if (d->op[i] == -3) (*count)++;
  mark_random(d, d->a[i], seen, count);
  mark_random(d, d->b[i], seen, count);
}

static void test_random_dags(void) {
  gt_rng r = {20240607};
  int graphs = 300, merged = 0, folded = 0, failures = 0;
  gr_passes_options o = gr_passes_options_default();
  for (int it = 0; it < graphs && failures < 3; it++) {
    dag d;
    build_dag(&d, &r);
    GR_CHECK(gr_graph_error(d.g) == NULL);
    gr_output fetches[NFETCH];
    int fi[NFETCH];
    for (int k = 0; k < NFETCH; k++) {
      fi[k] = k == 0 ? d.n - 1 : (int)gt_int(&r, d.n / 2, d.n - 1); /* late nodes need more */
      fetches[k] = d.out[fi[k]];
    }
    gr_output feeds[2] = {d.out[0], d.out[1]};
    gr_passes_stats st;
    gr_graph *opt = optimize(d.g, feeds, 2, fetches, NFETCH, NULL, 0, &o, &st);
    if (!opt) {
      failures++;
      gr_graph_free(d.g);
      continue;
    }
    merged += st.nodes_merged;
    folded += st.nodes_folded;
    bool seen[DAG_MAX] = {false};
    int randoms = 0;
    for (int k = 0; k < NFETCH; k++) mark_random(&d, fi[k], seen, &randoms);
    GR_CHECK_EQ_INT(count_op(opt, "random_uniform"), randoms);
    gr_tensor pv[2] = {gt_random(&r, GR_F32, (gr_shape){1, {4}}, -2, 2),
                       gt_random(&r, GR_F32, (gr_shape){1, {4}}, -2, 2)};
    gr_feed f[2] = {{d.out[0], &pv[0]}, {d.out[1], &pv[1]}};
    gr_session_options so = {.inter_op_threads = 1};
    gr_error err;
    gr_session *s1 = gr_session_new(d.g, &so, &err), *s2 = gr_session_new(opt, &so, &err);
    gr_tensor want[NFETCH], got[NFETCH];
    gr_feed f2[2];
    gr_output x2[NFETCH];
    int nf2 = 0;
    for (int k = 0; k < 2; k++) /* a placeholder nothing needs is gone from opt */
      if (gr_graph_find_node(opt, feeds[k].node->name))
        f2[nf2++] = (gr_feed){gt_same_in(opt, feeds[k]), &pv[k]};
    for (int k = 0; k < NFETCH; k++) x2[k] = gt_same_in(opt, fetches[k]);
    for (int step = 0; step < 2; step++) { /* random ops are keyed by step too */
      gr_status a = gr_session_run(s1, f, 2, fetches, NFETCH, want, NULL, 0, &err);
      GR_CHECK_OK(a, err);
      gr_status b = gr_session_run(s2, f2, nf2, x2, NFETCH, got, NULL, 0, &err);
      GR_CHECK_OK(b, err);
      for (int k = 0; k < NFETCH && a == GR_OK && b == GR_OK; k++) {
        bool same = gt_same_bits(&want[k], &got[k]);
        GR_CHECK_MSG(same, "graph %d, fetch '%s'", it, fetches[k].node->name);
        failures += !same;
      }
      for (int k = 0; k < NFETCH; k++) {
        if (a == GR_OK) gr_tensor_release(&want[k]);
        if (b == GR_OK) gr_tensor_release(&got[k]);
      }
    }
    gr_session_free(s1);
    gr_session_free(s2);
    gr_tensor_release(&pv[0]);
    gr_tensor_release(&pv[1]);
    gr_graph_free(opt);
    gr_graph_free(d.g);
  }
  printf("random DAGs: %d graphs, %d nodes merged, %d folded\n", graphs, merged, folded);
  GR_CHECK(merged > graphs / 2); /* the generator does make duplicates and constants */
  GR_CHECK(folded > graphs / 2);
}

/* ---- the example graph files ---------------------------------------------------------------- */

static void check_example(const gt_example *ex, const char *file) {
  if (ex->nx + ex->nt == 0) return; /* layers.gr: definitions only */
  gr_output feed_eps[GT_EX_MAX];
  for (int i = 0; i < ex->nf; i++) feed_eps[i] = ex->feeds[i].output;
  gr_passes_options o = gr_passes_options_default();
  gr_passes_stats ps;
  gr_graph *opt = optimize(ex->g, feed_eps, ex->nf, ex->fetch, ex->nx, ex->target, ex->nt, &o, &ps);
  printf("%-22s in %4d  pruned %4d  merged %3d  folded %3d  unused %3d  fused %2d  out %4d\n", file,
         ps.nodes_in, ps.nodes_pruned, ps.nodes_merged, ps.nodes_folded,
         ps.nodes_unused_after_folding, ps.nodes_fused, ps.nodes_out);
  gr_status st;
  GR_CHECK_MSG(gt_example_agree(ex, opt, file, "optimised graph", &st), "%s", file);
  if (st != GR_OK) /* placement.gr pins nodes to a cluster's devices: the same error */
    printf("  (%s does not run on this session's devices, nor does its optimised graph)\n", file);
  gr_graph_free(opt);
}

static void test_examples(void) {
  GR_CHECK(gt_for_each_example(check_example) >= 10);
}

int main(void) {
  GR_RUN(test_prune);
  GR_RUN(test_prune_keeps_variables_and_colocation);
  GR_RUN(test_cse_merges_equal_nodes);
  GR_RUN(test_cse_is_conservative);
  GR_RUN(test_fold);
  GR_RUN(test_fold_size_cap);
  GR_RUN(test_fold_leaves_random_and_failing_nodes);
  GR_RUN(test_fold_not_inside_loops);
  GR_RUN(test_errors);
  GR_RUN(test_random_dags);
  GR_RUN(test_examples);
  return gr_test_finish();
}
