/* Graph building: names and scopes, device scopes, control dependencies,
 * attrs with defaults, shape inference at add time, sticky errors. */
#include <graphrun.h>

#include "gr_test.h"

static void test_names_and_scopes(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_const_f32(g, 1);
  gr_output b = gr_const_f32(g, 2);
  GR_CHECK(strcmp(a.node->name, "const") == 0);
  GR_CHECK(strcmp(b.node->name, "const_1") == 0);
  GR_CHECK_OK(gr_graph_push_name_scope(g, "layer1"), *gr_graph_error(g));
  gr_output c = gr_add(g, a, b);
  GR_CHECK(strcmp(c.node->name, "layer1/add") == 0);
  gr_graph_push_name_scope(g, "inner");
  gr_output d = gr_add(g, c, b);
  GR_CHECK(strcmp(d.node->name, "layer1/inner/add") == 0);
  gr_graph_pop_name_scope(g);
  gr_output e = gr_name(g, gr_add(g, c, c), "sum");
  GR_CHECK(strcmp(e.node->name, "layer1/sum") == 0);
  gr_graph_pop_name_scope(g);
  GR_CHECK(strcmp(gr_graph_name_scope(g), "") == 0);
  GR_CHECK(gr_graph_find_node(g, "layer1/sum") == e.node);
  GR_CHECK(gr_graph_find_node(g, "layer1/add_1") == NULL);
  /* explicitly named nodes: a clash gets a suffix for auto names */
  gr_output f = gr_op(g, "add", "x", (gr_output[]){a, b}, 2, NULL, 0);
  gr_output f2 = gr_op(g, "add", "x", (gr_output[]){a, b}, 2, NULL, 0);
  GR_CHECK(strcmp(f.node->name, "x") == 0 && strcmp(f2.node->name, "x_1") == 0);
  /* many nodes of one op stay unique and cheap to name */
  for (int i = 0; i < 1000; i++) gr_add(g, a, b);
  GR_CHECK(gr_graph_find_node(g, "add_999") != NULL);
  GR_CHECK(gr_graph_error(g) == NULL);
  GR_CHECK_EQ_INT(gr_graph_num_nodes(g), 1007);
  for (int i = 0; i < gr_graph_num_nodes(g); i++) GR_CHECK(gr_graph_node(g, i)->id == i);
  gr_graph_free(g);
}

static void test_device_scopes(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_const_f32(g, 1);
  GR_CHECK(strcmp(a.node->requested_device, "") == 0);
  gr_graph_push_device_scope(g, "/job:worker/task:1");
  gr_output b = gr_const_f32(g, 1);
  gr_graph_push_device_scope(g, "/device:CPU:2");
  gr_output c = gr_const_f32(g, 1);
  gr_graph_push_device_scope(g, "/task:3");
  gr_output d = gr_const_f32(g, 1);
  gr_graph_pop_device_scope(g);
  gr_graph_pop_device_scope(g);
  gr_graph_pop_device_scope(g);
  GR_CHECK(strcmp(b.node->requested_device, "/job:worker/task:1") == 0);
  GR_CHECK(strcmp(c.node->requested_device, "/job:worker/task:1/device:CPU:2") == 0);
  GR_CHECK(strcmp(d.node->requested_device, "/job:worker/task:3/device:CPU:2") == 0);
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_graph_free(g);
}

/* Device functions see the spec of the scopes outside them and what they
 * return is merged under the scopes pushed inside; a reset scope hides all
 * of them. */
static const char *consts_to_ps(gr_graph *g, const gr_node *n, const char *spec, void *arg) {
  int *calls = arg;
  ++*calls;
  if (strcmp(n->name, "bad") == 0) return "/job:ps/task:x";
  if (strcmp(n->name, "fail") == 0) {
    gr_graph_set_errorf(g, GR_ERR_INVALID_ARGUMENT, "refused '%s' (outside: '%s')", n->name, spec);
    return NULL;
  }
  return strcmp(n->op->name, "const") == 0 ? "/job:ps/task:0" : spec;
}

static void test_device_functions(void) {
  gr_graph *g = gr_graph_new();
  int calls = 0;
  gr_graph_push_device_scope(g, "/job:worker/task:1");
  GR_CHECK(gr_graph_push_device_fn(g, consts_to_ps, &calls) == GR_OK);
  gr_output a = gr_const_f32(g, 1);
  gr_output b = gr_identity(g, a);
  gr_graph_push_device_scope(g, "/device:CPU:1");
  gr_output c = gr_const_f32(g, 1);
  gr_graph_push_device_scope(g, "/job:chief");
  gr_output d = gr_const_f32(g, 1);
  gr_graph_pop_device_scope(g);
  gr_graph_push_device_scope_reset(g, "/task:2");
  gr_output e = gr_const_f32(g, 1);
  gr_graph_push_device_scope(g, "/job:ps");
  gr_output f = gr_identity(g, e);
  gr_graph_pop_device_scope(g);
  gr_graph_pop_device_scope(g);
  gr_graph_pop_device_scope(g);
  gr_graph_pop_device_scope(g); /* the function */
  gr_output h = gr_const_f32(g, 1);
  gr_graph_pop_device_scope(g);
  GR_CHECK(!gr_graph_error(g));
  GR_CHECK(strcmp(a.node->requested_device, "/job:ps/task:0") == 0);
  GR_CHECK(strcmp(b.node->requested_device, "/job:worker/task:1") == 0);
  GR_CHECK(strcmp(c.node->requested_device, "/job:ps/task:0/device:CPU:1") == 0);
  GR_CHECK(strcmp(d.node->requested_device, "/job:chief/task:0/device:CPU:1") == 0);
  GR_CHECK(strcmp(e.node->requested_device, "/task:2") == 0);
  GR_CHECK(strcmp(f.node->requested_device, "/job:ps/task:2") == 0);
  GR_CHECK(strcmp(h.node->requested_device, "/job:worker/task:1") == 0);
  GR_CHECK_EQ_INT(calls, 4); /* a, b, c, d: not inside the reset, not after the pop */
  /* a bad spec from the function, and a function's own error */
  gr_graph_push_device_fn(g, consts_to_ps, &calls);
  gr_tensor one = gr_tensor_scalar_f32(1);
  gr_output x = gr_op(g, "const", "bad", NULL, 0, (gr_attr[]){gr_attr_tensor("value", one)}, 1);
  gr_tensor_release(&one);
  GR_CHECK(!x.node);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "node 'bad': its device function gave");
  gr_graph_clear_error(g);
  gr_output y = gr_op(g, "identity", "fail", &a, 1, NULL, 0);
  GR_CHECK(!y.node);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "refused 'fail' (outside: '')");
  gr_graph_pop_device_scope(g);
  GR_CHECK(gr_graph_find_node(g, "bad") == NULL && gr_graph_find_node(g, "fail") == NULL);
  gr_graph_free(g);
}

static void test_control_deps_and_attrs(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_const_f32(g, 1);
  gr_output b = gr_const_f32(g, 2);
  gr_graph_push_control_deps(g, &a, 1);
  gr_output c = gr_identity(g, b);
  gr_graph_push_control_deps(g, &b, 1);
  gr_output d = gr_identity(g, b);
  gr_graph_pop_control_deps(g);
  gr_graph_pop_control_deps(g);
  gr_output e = gr_identity(g, b);
  GR_CHECK_EQ_INT(c.node->num_control_inputs, 1);
  GR_CHECK(c.node->control_inputs[0] == a.node);
  GR_CHECK_EQ_INT(d.node->num_control_inputs, 2);
  GR_CHECK_EQ_INT(e.node->num_control_inputs, 0);
  gr_output grp = gr_group(g, "all", (gr_output[]){c, d, e}, 3);
  GR_CHECK_EQ_INT(grp.node->num_control_inputs, 3);
  GR_CHECK_EQ_INT(grp.node->num_outputs, 0);
  GR_CHECK_EQ_INT(grp.index, -1);
  /* defaults are filled in */
  gr_output m = gr_op(g, "matmul", NULL,
                      (gr_output[]){gr_placeholder(g, "p", GR_F32, (gr_shape){2, {3, 4}}),
                                    gr_placeholder(g, "q", GR_F32, (gr_shape){2, {4, 5}})},
                      2, NULL, 0);
  GR_CHECK(gr_node_attr(m.node, "transpose_a") != NULL);
  GR_CHECK(gr_node_attr_bool(m.node, "transpose_b", true) == false);
  char b2[GR_SHAPE_STR_MAX];
  GR_CHECK(strcmp(gr_shape_str(&m.node->out_shapes[0], b2), "[3, 5]") == 0);
  /* int attrs are accepted where floats are expected */
  GR_CHECK(gr_graph_error(g) == NULL);
  /* a scalar attr set after the node is built; other attrs and types refused */
  gr_attr tb = gr_attr_bool("transpose_b", true), ta = gr_attr_int("transpose_a", 1);
  gr_attr nope = gr_attr_bool("nope", true), str = gr_attr_string("transpose_a", "x");
  GR_CHECK(gr_graph_set_attr(g, m.node, &tb) == GR_OK);
  GR_CHECK(gr_node_attr_bool(m.node, "transpose_b", false) == true);
  GR_CHECK(gr_graph_set_attr(g, m.node, &ta) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "attr 'transpose_a' is bool, not int");
  gr_graph_clear_error(g);
  GR_CHECK(gr_graph_set_attr(g, m.node, &nope) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "has no attr 'nope'");
  gr_graph_clear_error(g);
  GR_CHECK(gr_graph_set_attr(g, m.node, &str) != GR_OK);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "only bool, int and float");
  gr_graph_free(g);
}

static void test_shape_inference_unknown_dims(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){2, {-1, 784}});
  gr_output w = gr_placeholder(g, "w", GR_F32, (gr_shape){2, {784, 10}});
  gr_output y = gr_matmul(g, x, w, false, false);
  char b[GR_SHAPE_STR_MAX];
  GR_CHECK(strcmp(gr_shape_str(&y.node->out_shapes[0], b), "[?, 10]") == 0);
  gr_output u = gr_placeholder(g, "u", GR_F32, gr_shape_unknown());
  gr_output s = gr_add(g, u, y);
  GR_CHECK(s.node->out_shapes[0].rank == -1);
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_graph_free(g);
}

static void test_sticky_errors(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_const_f32(g, 1);
  gr_output bad = gr_add(g, a, gr_const_i32(g, 1)); /* dtype error */
  GR_CHECK(bad.node == NULL);
  const gr_error *e = gr_graph_error(g);
  GR_CHECK(e && e->code == GR_ERR_DTYPE);
  char first[GR_ERROR_MSG_MAX];
  strcpy(first, e->msg);
  gr_output worse = gr_mul(g, bad, a); /* null input: no new error */
  GR_CHECK(worse.node == NULL);
  GR_CHECK(strcmp(gr_graph_error(g)->msg, first) == 0);
  gr_output ok = gr_add(g, a, a); /* building continues */
  GR_CHECK(ok.node != NULL);
  gr_error err;
  GR_CHECK(gr_session_new(g, NULL, &err) == NULL);
  GR_CHECK_STR_CONTAINS(err.msg, "build error");
  gr_graph_clear_error(g);
  gr_session *s = gr_session_new(g, NULL, &err);
  GR_CHECK(s != NULL);
  gr_session_free(s);
  gr_graph_free(g);
}

static void test_source_locations(void) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_source_loc(g, "model.gr:7:12");
  gr_output a = gr_placeholder(g, "a", GR_F32, (gr_shape){1, {3}});
  gr_output b = gr_placeholder(g, "b", GR_F32, (gr_shape){1, {4}});
  GR_CHECK(strcmp(a.node->source_loc, "model.gr:7:12") == 0);
  gr_add(g, a, b);
  const gr_error *e = gr_graph_error(g);
  GR_CHECK(e && e->code == GR_ERR_SHAPE);
  if (e) {
    GR_CHECK(strncmp(e->msg, "model.gr:7:12: ", 15) == 0);
    GR_CHECK_STR_CONTAINS(e->msg, "[3]");
    GR_CHECK_STR_CONTAINS(e->msg, "[4]");
    GR_CHECK_STR_CONTAINS(e->msg, "node 'add'");
  }
  gr_graph_free(g);
}

/* An exact copy into another graph keeps name, attrs, devices and source
 * position, ignores the destination's scopes, and refuses a taken name. */
static void test_copy_node(void) {
  gr_graph *g = gr_graph_new();
  gr_graph_set_source_loc(g, "m.gr:3:1");
  gr_graph_push_device_scope(g, "/device:CPU:1");
  gr_graph_push_name_scope(g, "layer");
  gr_output a = gr_placeholder(g, "a", GR_F32, (gr_shape){2, {-1, 3}});
  gr_output c = gr_const_f32(g, 2);
  gr_output m = gr_mul(g, a, c);
  gr_graph_pop_name_scope(g);
  gr_graph_pop_device_scope(g);
  gr_graph_set_colocation(g, m.node, "layer/a");
  m.node->assigned_device = "/job:localhost/replica:0/task:0/device:CPU:1";
  GR_CHECK(gr_graph_error(g) == NULL);

  gr_graph *h = gr_graph_new();
  gr_graph_push_name_scope(h, "ignored");
  gr_output a2 = gr_graph_copy_node(h, a.node, NULL, NULL, 0);
  gr_output c2 = gr_graph_copy_node(h, c.node, NULL, NULL, 0);
  gr_output m2 = gr_graph_copy_node(h, m.node, (gr_output[]){a2, c2}, (gr_node *[]){c2.node}, 1);
  GR_CHECK(gr_graph_error(h) == NULL);
  GR_CHECK(strcmp(m2.node->name, "layer/mul") == 0);
  GR_CHECK(strcmp(m2.node->requested_device, m.node->requested_device) == 0);
  GR_CHECK(strcmp(m2.node->assigned_device, m.node->assigned_device) == 0);
  GR_CHECK(strcmp(m2.node->colocate_with, "layer/a") == 0);
  GR_CHECK(strcmp(m2.node->source_loc, "m.gr:3:1") == 0);
  GR_CHECK(m2.node->num_control_inputs == 1 && m2.node->control_inputs[0] == c2.node);
  GR_CHECK(m2.node->out_shapes[0].rank == 2 && m2.node->out_shapes[0].dims[1] == 3);
  GR_CHECK(gr_tensor_get_f64(&gr_node_attr(c2.node, "value")->tensor, 0) == 2.0);
  /* the destination's own source position is untouched */
  gr_output z = gr_const_f32(h, 0);
  GR_CHECK(z.node->source_loc == NULL);
  gr_graph_copy_node(h, a.node, NULL, NULL, 0);
  const gr_error *e = gr_graph_error(h);
  GR_CHECK(e && e->code == GR_ERR_ALREADY_EXISTS);
  if (e) GR_CHECK_STR_CONTAINS(e->msg, "layer/a");
  gr_graph_free(h);
  gr_graph_free(g);
}

/* The name index under many adds and renames (removal keeps probe chains
 * intact), and data that nodes share: equal shapes and equal consecutive
 * source positions are stored once, different ones stay apart. */
static void test_many_names_and_shared_data(void) {
  gr_graph *g = gr_graph_new();
  gr_output x = gr_placeholder(g, "x", GR_F32, (gr_shape){1, {3}});
  gr_output y = gr_placeholder(g, "y", GR_F32, (gr_shape){2, {2, 5}});
  enum { N = 5000 };
  static gr_node *nodes[N];
  char name[32], loc[32];
  for (int i = 0; i < N; i++) {
    snprintf(loc, sizeof loc, "f.gr:%d:1", i / 2);
    gr_graph_set_source_loc(g, loc);
    nodes[i] = gr_relu(g, i % 2 ? y : x).node;
  }
  gr_graph_set_source_loc(g, NULL);
  for (int i = 0; i < N; i += 3) {
    snprintf(name, sizeof name, "r%d", i);
    GR_CHECK(gr_name(g, (gr_output){nodes[i], 0}, name).node == nodes[i]);
  }
  GR_CHECK(gr_graph_error(g) == NULL);
  int bad_names = 0, bad_shapes = 0, bad_locs = 0;
  for (int i = 0; i < N; i++) {
    char auto_name[32];
    snprintf(auto_name, sizeof auto_name, i ? "relu_%d" : "relu", i);
    snprintf(name, sizeof name, "r%d", i);
    if (i % 3 == 0)
      bad_names += gr_graph_find_node(g, name) != nodes[i] || gr_graph_find_node(g, auto_name);
    else
      bad_names += gr_graph_find_node(g, auto_name) != nodes[i] || gr_graph_find_node(g, name);
    const gr_shape *s = &nodes[i]->out_shapes[0];
    bad_shapes += i % 2 ? s->rank != 2 || s->dims[0] != 2 || s->dims[1] != 5
                        : s->rank != 1 || s->dims[0] != 3 || nodes[i]->out_dtypes[0] != GR_F32;
    snprintf(loc, sizeof loc, "f.gr:%d:1", i / 2);
    bad_locs += strcmp(nodes[i]->source_loc, loc) != 0 ||
                (i % 2 && nodes[i]->source_loc != nodes[i - 1]->source_loc);
  }
  GR_CHECK_EQ_INT(bad_names, 0);
  GR_CHECK_EQ_INT(bad_shapes, 0);
  GR_CHECK_EQ_INT(bad_locs, 0);
  /* a freed name can be taken again; a new auto name skips the taken ones */
  GR_CHECK(gr_name(g, (gr_output){nodes[0], 0}, "relu").node == nodes[0]);
  gr_output z = gr_relu(g, x);
  GR_CHECK(z.node && gr_graph_find_node(g, z.node->name) == z.node);
  GR_CHECK(z.node && strcmp(z.node->name, "relu") != 0);
  GR_CHECK(gr_graph_error(g) == NULL);
  gr_name(g, (gr_output){nodes[1], 0}, "relu");
  GR_CHECK(gr_graph_error(g) && gr_graph_error(g)->code == GR_ERR_ALREADY_EXISTS);
  gr_graph_free(g);
}

/* Control inputs that would close a cycle are refused, also after edges
 * that point back in the order nodes were made (the cycle check's order is
 * then computed again); the ones that close none are taken. */
static void test_control_input_cycles(void) {
  gr_graph *g = gr_graph_new();
  gr_output a = gr_const_f32(g, 1), b = gr_neg(g, a), c = gr_neg(g, b);
  GR_CHECK(gr_graph_add_control_input(g, c.node, a.node) == GR_OK); /* forward */
  GR_CHECK(gr_graph_add_control_input(g, a.node, c.node) == GR_ERR_INVALID_ARGUMENT);
  GR_CHECK_STR_CONTAINS(gr_graph_error(g)->msg, "would make a cycle");
  gr_graph_clear_error(g);
  /* a newer node feeds an older one: the order of making is no longer one */
  gr_output d = gr_const_f32(g, 2), e = gr_neg(g, d);
  GR_CHECK_OK(gr_graph_set_input(g, b.node, 0, e), *gr_graph_error(g));
  GR_CHECK(gr_graph_add_control_input(g, d.node, c.node) == GR_ERR_INVALID_ARGUMENT);
  gr_graph_clear_error(g);
  GR_CHECK(gr_graph_add_control_input(g, e.node, b.node) == GR_ERR_INVALID_ARGUMENT);
  gr_graph_clear_error(g);
  GR_CHECK(gr_graph_add_control_input(g, a.node, d.node) == GR_OK); /* a is free now */
  GR_CHECK(gr_graph_add_control_input(g, d.node, a.node) == GR_ERR_INVALID_ARGUMENT);
  gr_graph_clear_error(g);
  /* a longer chain, checked both ways after another edge back */
  gr_output x[40];
  x[0] = gr_const_f32(g, 3);
  for (int k = 1; k < 40; k++) x[k] = gr_neg(g, x[k - 1]);
  GR_CHECK_OK(gr_graph_set_input(g, x[1].node, 0, c), *gr_graph_error(g));
  GR_CHECK(gr_graph_add_control_input(g, d.node, x[39].node) == GR_ERR_INVALID_ARGUMENT);
  gr_graph_clear_error(g);
  GR_CHECK(gr_graph_add_control_input(g, x[39].node, x[0].node) == GR_OK);
  gr_graph_free(g);
}

int main(void) {
  GR_RUN(test_control_input_cycles);
  GR_RUN(test_names_and_scopes);
  GR_RUN(test_device_scopes);
  GR_RUN(test_device_functions);
  GR_RUN(test_control_deps_and_attrs);
  GR_RUN(test_shape_inference_unknown_dims);
  GR_RUN(test_sticky_errors);
  GR_RUN(test_source_locations);
  GR_RUN(test_copy_node);
  GR_RUN(test_many_names_and_shared_data);
  return gr_test_finish();
}
