/* Loop frames (core/frames.h) on small hand-made node sets: nested
 * frames and their exits, the lookup of a frame by (parent, name), nodes
 * placed by control inputs only, the first-input and the deepest-input
 * rules (autodiff's frames one per name, moved inside the deepest parent),
 * and the edge check. Its out-of-memory paths run in test_alloc_failures
 * (scenario "frames"). */
#include "core/core_engine.h"
#include "core/gr_core.h"
#include "gr_test.h"

enum { MAX_NODES = 32, MAX_IN = 3 };

/* Nodes in the order they are added (a topological order), each with its
 * data inputs (a node index, or GR_FRAMES_TOP_LEVEL for a feed) and control
 * inputs. An enter's frame is its name (no frame_name attr). */
typedef struct tgraph {
  gr_node nodes[MAX_NODES];
  int data[MAX_NODES][MAX_IN], ndata[MAX_NODES];
  int ctl[MAX_NODES][MAX_IN], nctl[MAX_NODES];
  int order[MAX_NODES];
  int n;
} tgraph;

/* Adds a node with data inputs d[0..nd) and control inputs c[0..nc); returns its index. */
static int add(tgraph *t, const char *name, const gr_op_def *op, int nd, const int *d, int nc,
               const int *c) {
  int i = t->n++;
  t->nodes[i] = (gr_node){.id = i, .name = name, .op = op};
  for (int j = 0; j < nd; j++) t->data[i][j] = d[j];
  for (int j = 0; j < nc; j++) t->ctl[i][j] = c[j];
  t->ndata[i] = nd, t->nctl[i] = nc;
  t->order[i] = i;
  return i;
}

static int node0(tgraph *t, const char *name) {
  return add(t, name, &gr_op_const, 0, NULL, 0, NULL);
}
static int node1(tgraph *t, const char *name, const gr_op_def *op, int in) {
  return add(t, name, op, 1, &in, 0, NULL);
}

static const gr_node *t_node(const void *ctx, int i) {
  return &((const tgraph *)ctx)->nodes[i];
}

static void t_inputs(const void *ctx, int i, gr_frames_emit_fn emit, void *acc) {
  const tgraph *t = ctx;
  for (int j = 0; j < t->ndata[i]; j++) emit(acc, t->data[i][j], false);
  for (int j = 0; j < t->nctl[i]; j++) emit(acc, t->ctl[i][j], true);
}

static void assign(const tgraph *t, gr_frames_rule rule, gr_frames *fr) {
  GR_CHECK(gr_frames_init(fr, rule, t->n) == GR_OK);
  GR_CHECK(gr_frames_assign_nodes(fr, t->order, t_node, t_inputs, t) == GR_OK);
}

static void test_nested_frames(void) {
  tgraph t = {0};
  int c = node0(&t, "c");
  int e_out = node1(&t, "outer", &gr_op_enter, c);
  int x = node1(&t, "x", &gr_op_identity, e_out);
  int e_in = node1(&t, "inner", &gr_op_enter, x);
  int y = node1(&t, "y", &gr_op_identity, e_in);
  int ex_in = node1(&t, "exit_inner", &gr_op_exit, y);
  int z = node1(&t, "z", &gr_op_identity, ex_in);
  int ex_out = node1(&t, "exit_outer", &gr_op_exit, z);
  int w = node1(&t, "w", &gr_op_identity, ex_out);
  int e_in2 = node1(&t, "inner", &gr_op_enter, z); /* the same frame: same parent and name */
  int e_top = node1(&t, "inner", &gr_op_enter, c); /* another frame of that name, at the top */
  gr_frames fr;
  assign(&t, GR_FRAMES_FIRST_INPUT, &fr);
  GR_CHECK_EQ_INT(fr.num_frames, 4);
  int outer = fr.of_node[e_out], inner = fr.of_node[e_in], other = fr.of_node[e_top];
  GR_CHECK(outer == 1 && inner == 2 && other == 3);
  GR_CHECK(strcmp(fr.frames[0].name, "") == 0 && fr.frames[0].parent == -1);
  GR_CHECK(strcmp(fr.frames[outer].name, "outer") == 0 && fr.frames[outer].parent == 0);
  GR_CHECK(strcmp(fr.frames[inner].name, "inner") == 0 && fr.frames[inner].parent == outer);
  GR_CHECK(strcmp(fr.frames[other].name, "inner") == 0 && fr.frames[other].parent == 0);
  GR_CHECK(fr.frames[outer].enter == e_out && fr.frames[inner].enter == e_in);
  GR_CHECK_EQ_INT(fr.of_node[e_in2], inner);
  GR_CHECK(fr.entered[e_out] && fr.entered[e_in] && fr.entered[e_in2] && !fr.entered[x]);
  GR_CHECK_EQ_INT(gr_frames_get_depth(&fr, inner), 2);
  GR_CHECK_EQ_INT(gr_frames_get_depth(&fr, other), 1);
  /* nodes, their outputs and their inputs */
  int want_frame[] = {0, outer, outer, inner, inner, inner, outer, outer, 0, inner, other};
  for (int i = 0; i < t.n; i++) GR_CHECK_MSG(fr.of_node[i] == want_frame[i], "node %d", i);
  GR_CHECK_EQ_INT(gr_frames_output_frame(&fr, ex_in), outer);
  GR_CHECK_EQ_INT(gr_frames_output_frame(&fr, ex_out), 0);
  GR_CHECK_EQ_INT(gr_frames_output_frame(&fr, y), inner);
  GR_CHECK_EQ_INT(gr_frames_input_frame(&fr, e_in), outer);
  GR_CHECK_EQ_INT(gr_frames_input_frame(&fr, e_out), 0);
  GR_CHECK_EQ_INT(gr_frames_input_frame(&fr, ex_in), inner);
  /* a value stays in its frame but through an enter or an exit */
  GR_CHECK(gr_frames_check_edge(&fr, c, e_out) && gr_frames_check_edge(&fr, x, e_in));
  GR_CHECK(gr_frames_check_edge(&fr, y, ex_in) && gr_frames_check_edge(&fr, ex_in, z));
  GR_CHECK(gr_frames_check_edge(&fr, ex_out, w));
  GR_CHECK(!gr_frames_check_edge(&fr, y, w) && !gr_frames_check_edge(&fr, x, w));
  GR_CHECK(!gr_frames_check_edge(&fr, c, x) && !gr_frames_check_edge(&fr, y, z));
  /* the lookup of a frame by (parent, name) */
  GR_CHECK_EQ_INT(gr_frames_get_child(&fr, outer, "inner", -1), inner);
  GR_CHECK_EQ_INT(gr_frames_get_child(&fr, 0, "outer", -1), outer);
  GR_CHECK_EQ_INT(gr_frames_get_child(&fr, inner, "outer", 7), 4);
  GR_CHECK(fr.frames[4].parent == inner && fr.frames[4].enter == 7 && fr.num_frames == 5);
  gr_frames_free(&fr);
  GR_CHECK(fr.frames == NULL && fr.of_node == NULL && fr.num_frames == 0);
}

/* Many frames: the tree grows past its first capacity. */
static void test_many_frames(void) {
  static const char *names[] = {"l0", "l1",  "l2",  "l3",  "l4",  "l5",  "l6",  "l7",  "l8",
                                "l9", "l10", "l11", "l12", "l13", "l14", "l15", "l16", "l17"};
  enum { DEEP = sizeof names / sizeof *names };
  tgraph t = {0};
  int prev = node0(&t, "c");
  for (int k = 0; k < DEEP; k++) prev = node1(&t, names[k], &gr_op_enter, prev);
  for (int rule = 0; rule < 2; rule++) {
    gr_frames fr;
    assign(&t, rule ? GR_FRAMES_DEEPEST_INPUT : GR_FRAMES_FIRST_INPUT, &fr);
    GR_CHECK_EQ_INT(fr.num_frames, DEEP + 1);
    GR_CHECK_EQ_INT(gr_frames_get_depth(&fr, fr.of_node[prev]), DEEP);
    for (int f = 1; f <= DEEP; f++) GR_CHECK(strcmp(fr.frames[f].name, names[f - 1]) == 0);
    gr_frames_free(&fr);
  }
}

static void test_control_inputs(void) {
  tgraph t = {0};
  int c = node0(&t, "c");
  int e = node1(&t, "loop", &gr_op_enter, c);
  int x = node1(&t, "x", &gr_op_identity, e);
  int ex = node1(&t, "exit", &gr_op_exit, x);
  int by_ctl = add(&t, "by_ctl", &gr_op_const, 0, NULL, 1, &x);
  int after_exit = add(&t, "after_exit", &gr_op_const, 0, NULL, 1, &ex);
  int alone = node0(&t, "alone");
  int fed = add(&t, "fed", &gr_op_identity, 1, (int[]){GR_FRAMES_TOP_LEVEL}, 1, &x);
  int ctl_enter = add(&t, "ctl_enter", &gr_op_enter, 0, NULL, 1, &x);
  int fed_enter = node1(&t, "fed_loop", &gr_op_enter, GR_FRAMES_TOP_LEVEL);
  int ahead = add(&t, "ahead", &gr_op_identity, 1, (int[]){t.n + 1}, 1, &x); /* two_ctl */
  int two_ctl = add(&t, "two_ctl", &gr_op_const, 0, NULL, 2, (int[]){ex, x});
  gr_frames fr;
  assign(&t, GR_FRAMES_FIRST_INPUT, &fr);
  int loop = fr.of_node[e];
  GR_CHECK_EQ_INT(loop, 1);
  GR_CHECK_EQ_INT(fr.of_node[by_ctl], loop);    /* only a control input, in the loop */
  GR_CHECK_EQ_INT(fr.of_node[after_exit], 0);   /* only a control input, from an exit */
  GR_CHECK_EQ_INT(fr.of_node[alone], 0);        /* no inputs: the top level */
  GR_CHECK_EQ_INT(fr.of_node[fed], 0);          /* a data input beats a control input */
  GR_CHECK_EQ_INT(fr.of_node[ctl_enter], loop); /* an enter without data enters nothing */
  GR_CHECK(!fr.entered[ctl_enter] && fr.entered[e] && fr.entered[fed_enter]);
  GR_CHECK_EQ_INT(fr.frames[fr.of_node[fed_enter]].parent, 0); /* a feed is at the top level */
  GR_CHECK_EQ_INT(fr.of_node[ahead], 0);   /* a producer not assigned yet: the top level */
  GR_CHECK_EQ_INT(fr.of_node[two_ctl], 0); /* the first control input */
  GR_CHECK_EQ_INT(fr.num_frames, 3);
  GR_CHECK(gr_frames_check_edge(&fr, x, by_ctl) && !gr_frames_check_edge(&fr, x, fed));
  gr_frames_free(&fr);
}

static void test_deepest_rule(void) {
  tgraph t = {0};
  int c = node0(&t, "c");
  int e_a = node1(&t, "A", &gr_op_enter, c);
  int a = node1(&t, "a", &gr_op_identity, e_a);
  int top_first = add(&t, "top_first", &gr_op_identity, 2, (int[]){c, a}, 0, NULL);
  int a_first = add(&t, "a_first", &gr_op_identity, 2, (int[]){a, c}, 0, NULL);
  int by_ctl = add(&t, "by_ctl", &gr_op_identity, 1, &c, 1, &a);
  int e_b = node1(&t, "B", &gr_op_enter, c); /* B at the top level ... */
  int b = node1(&t, "b", &gr_op_identity, e_b);
  int ex_b = node1(&t, "exit_b", &gr_op_exit, b);
  int e_b2 = node1(&t, "B", &gr_op_enter, a); /* ... then inside A: moved there */
  int after = node1(&t, "after", &gr_op_identity, ex_b);
  int e_a2 = node1(&t, "A", &gr_op_enter, b);         /* A from inside A: not moved into B */
  int e_c = add(&t, "C", &gr_op_enter, 1, &c, 1, &b); /* an enter nests in its first input's */

  gr_frames fr;
  assign(&t, GR_FRAMES_DEEPEST_INPUT, &fr);
  int fa = fr.of_node[e_a], fb = fr.of_node[e_b];
  GR_CHECK_EQ_INT(fr.num_frames, 4);
  GR_CHECK_EQ_INT(fr.of_node[top_first], fa); /* the deepest input, wherever it is */
  GR_CHECK_EQ_INT(fr.of_node[a_first], fa);
  GR_CHECK_EQ_INT(fr.of_node[by_ctl], fa); /* control inputs count as deep */
  GR_CHECK_EQ_INT(fr.of_node[e_b2], fb);   /* one frame per name */
  GR_CHECK_EQ_INT(fr.frames[fb].parent, fa);
  GR_CHECK_EQ_INT(gr_frames_output_frame(&fr, ex_b), fa); /* the exit follows the move */
  GR_CHECK_EQ_INT(fr.of_node[after], fa);
  GR_CHECK_EQ_INT(fr.of_node[e_a2], fa);
  GR_CHECK_EQ_INT(fr.frames[fa].parent, 0);
  GR_CHECK_EQ_INT(fr.frames[fr.of_node[e_c]].parent, 0);
  GR_CHECK_EQ_INT(gr_frames_get_depth(&fr, fb), 2);
  gr_frames_free(&fr);

  /* the first-input rule: frames per (parent, name), nodes by their first input */
  assign(&t, GR_FRAMES_FIRST_INPUT, &fr);
  GR_CHECK_EQ_INT(fr.of_node[top_first], 0);
  GR_CHECK_EQ_INT(fr.of_node[a_first], fa);
  GR_CHECK_EQ_INT(fr.of_node[by_ctl], 0);
  GR_CHECK(fr.of_node[e_b2] != fb && fr.frames[fr.of_node[e_b2]].parent == fa);
  GR_CHECK_EQ_INT(fr.frames[fb].parent, 0);
  GR_CHECK_EQ_INT(gr_frames_output_frame(&fr, ex_b), 0);
  GR_CHECK_EQ_INT(fr.frames[fr.of_node[e_a2]].parent, fb);
  GR_CHECK_EQ_INT(fr.num_frames, 6);
  gr_frames_free(&fr);
}

int main(void) {
  GR_RUN(test_nested_frames);
  GR_RUN(test_many_frames);
  GR_RUN(test_control_inputs);
  GR_RUN(test_deepest_rule);
  return gr_test_finish();
}
